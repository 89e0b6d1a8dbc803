"""One decorator that registers a backbone into both OpenMMLab model registries.

Only the top-level backbones are registered; blocks stay plain ``nn.Module``s.
Importing this module pulls in ``mmdet.registry`` and ``mmseg.registry`` only
(no compiled mmcv ops, no model zoo), so ``import inline_mm`` stays cheap.
"""
from mmdet.registry import MODELS as MMDET_MODELS
from mmseg.registry import MODELS as MMSEG_MODELS

__all__ = ['MMDET_MODELS', 'MMSEG_MODELS', 'register_backbone']


def register_backbone(cls):
    """Register ``cls`` under its class name in mmdet's and mmseg's ``MODELS``."""
    MMDET_MODELS.register_module(module=cls)
    MMSEG_MODELS.register_module(module=cls)
    return cls
