from .backbones import *  # noqa: F401,F403  (registers the backbones)
from .inline_attention import InLineAttention, inline_attention, local_residual
from .simple_fpn import LayerNorm2d, SimpleFPN  # noqa: F401  (registers the neck in mmdet)

__all__ = ['InLineAttention', 'inline_attention', 'local_residual', 'SimpleFPN', 'LayerNorm2d']
