"""The class the backbones derive from, :data:`InitCfgModule`: mmengine's ``BaseModule``
where mmengine is installed, else :class:`StandInBaseModule` (a timm-only install,
:mod:`inline_mm.timm`), so that the backbones build and load weights without OpenMMLab."""
import torch.nn as nn

__all__ = ['InitCfgModule', 'StandInBaseModule']


class StandInBaseModule(nn.Module):
    """What the backbones use of mmengine's ``BaseModule``, without mmengine: it keeps
    ``init_cfg``; only ``Pretrained`` (which the backbones load themselves) or no
    ``init_cfg`` can be applied."""

    def __init__(self, init_cfg=None):
        super().__init__()
        self.init_cfg = init_cfg
        self._is_init = False

    def init_weights(self):
        raise RuntimeError(f'init_cfg={self.init_cfg!r} needs mmengine; without it only '
                           "dict(type='Pretrained', checkpoint=...) or None is supported")


try:
    from mmengine.model import BaseModule as InitCfgModule
except ModuleNotFoundError as e:  # timm-only installs (inline_mm.timm) have no mmengine
    if e.name is None or e.name.split('.')[0] != 'mmengine':
        raise
    InitCfgModule = StandInBaseModule
