"""The InLine backbones, self-contained: nothing here imports the rest of ``inline_mm``.

Importing this package registers every family of :data:`FAMILIES` in mmdet's and
mmseg's ``MODELS`` (whichever is installed).
"""
# The families are declared as their files are imported, in this order (that of FAMILIES).
from .inline_swin import InLineSwin, WindowAttention  # isort: skip
from .inline_pvt import InLinePVT  # isort: skip
from .inline_cswin import InLineCSwin  # isort: skip
from .inline_deit import InLineDeiT  # isort: skip
from .attention import InLineAttention
from .base import InLineBackbone, using_impl
from .checkpoint import CheckpointError, load_pretrained, read_checkpoint, save_converted
from .classifier import InLineClassifier, InLineFeatures, InLineIntermediates
from .families import FAMILIES, Family, convert_official, detect_family, get_family
from .inline_function import inline_attention, local_residual
from .registry import FRAMEWORKS, framework_registry

#: frameworks the backbones were registered in (``'mmdet'``, ``'mmseg'``)
REGISTERED_IN = [f for f in FRAMEWORKS if framework_registry(f) is not None]

__all__ = ['InLineSwin', 'InLinePVT', 'InLineCSwin', 'InLineDeiT', 'InLineBackbone', 'FAMILIES',
           'Family',
           'get_family', 'detect_family', 'convert_official', 'CheckpointError',
           'read_checkpoint', 'load_pretrained', 'save_converted', 'InLineAttention',
           'WindowAttention', 'inline_attention', 'local_residual', 'using_impl', 'REGISTERED_IN',
           'InLineClassifier', 'InLineFeatures', 'InLineIntermediates']
