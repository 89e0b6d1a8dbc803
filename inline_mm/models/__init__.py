from .backbones import *  # noqa: F401,F403  (registers the backbones)
from .inline_attention import InLineAttention, inline_attention, local_residual

__all__ = ['InLineAttention', 'inline_attention', 'local_residual']
