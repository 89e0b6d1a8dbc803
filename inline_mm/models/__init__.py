"""The InLine backbones, self-contained: nothing here imports the rest of ``inline_mm``.

Importing this package registers every family of :data:`FAMILIES` in mmdet's and
mmseg's ``MODELS`` (whichever is installed).
"""
from .attention import InLineAttention
from .base import InLineBackbone, using_impl
from .checkpoint import CheckpointError, load_pretrained, read_checkpoint, save_converted
from .families import FAMILIES, Family, convert_official, detect_family, get_family
from .inline_cswin import InLineCSwin
from .inline_deit import InLineDeiT
from .inline_function import inline_attention, local_residual
from .inline_pvt import InLinePVT
from .inline_swin import InLineSwin, WindowAttention
from .registry import register_backbones

#: frameworks the backbones were registered in (``'mmdet'``, ``'mmseg'``)
REGISTERED_IN = register_backbones(f.cls for f in FAMILIES.values())

__all__ = ['InLineSwin', 'InLinePVT', 'InLineCSwin', 'InLineDeiT', 'InLineBackbone', 'FAMILIES',
           'Family',
           'get_family', 'detect_family', 'convert_official', 'CheckpointError',
           'read_checkpoint', 'load_pretrained', 'save_converted', 'InLineAttention',
           'WindowAttention', 'inline_attention', 'local_residual', 'using_impl', 'REGISTERED_IN']
