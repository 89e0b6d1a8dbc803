"""InLine attention backbones for mmdetection 3.x and mmsegmentation 1.x.

``import inline_mm`` registers ``InLineSwin``, ``InLinePVT``, ``InLineCSwin`` and ``InLineDeiT`` in
both ``mmdet.registry.MODELS`` and ``mmseg.registry.MODELS`` (configs do it with
``custom_imports = dict(imports=['inline_mm'], allow_failed_imports=False)``).
"""
from . import compat  # noqa: F401  (must run before any checkpoint is loaded)
from .models import *  # noqa: F401,F403
from . import datasets  # noqa: F401  (SegFolderDataset, PaletteIoUMetric; lazy, cheap)
from . import engine  # noqa: F401  (reliability hooks; CPU DDP, safe checkpoints)
from .version import __version__

__all__ = ['__version__']
