"""The mmdet parts the shipped configs use beside the backbones, registered in mmdet's
``MODELS`` by ``import inline_mm`` (with mmdet installed): ViTDet's ``SimpleFPN`` neck and
its channel LayerNorm ``LN2d`` (InLine-DeiT's Mask R-CNN), and ``PadAwareRPNHead`` (the
Mask R-CNN configs; its module, which imports mmdet's model zoo, only when a config builds
the head)."""
from ..registry import register_lazy
from .simple_fpn import LayerNorm2d, SimpleFPN, register_neck

__all__ = ['SimpleFPN', 'LayerNorm2d']

register_neck()
register_lazy('mmdet', 'PadAwareRPNHead', 'inline_mm.models.detection.pad_aware_rpn')
