"""The InLine backbones as timm models, for timm-based code (``features_only``).

    import timm
    import inline_mm.timm  # registers inline_swin_tiny, inline_pvt_small, ...
    model = timm.create_model('inline_swin_tiny', pretrained=True, features_only=True,
                              pretrained_cfg_overlay=dict(file='inline://swin_t'))
    model.feature_info.channels()      # [96, 192, 384, 768]
    model.feature_info.reduction()     # [4, 8, 16, 32]
    features = model(images)                                        # list of NCHW maps

Needs torch and timm only: with mmengine/mmcv/mmdet/mmseg absent, ``import
inline_mm.timm`` works (``inline_mm`` then registers nothing in OpenMMLab).

One model name per family of :data:`inline_mm.models.FAMILIES` and preset:
``inline_<family>_<preset>`` (``inline_swin_tiny``, ``inline_pvt_medium``,
``inline_cswin_base``, ...; :data:`MODEL_NAMES` lists them).  Each builds the
OpenMMLab backbone itself (same class, same weights, same outputs) inside
:class:`InLineFeatures`, which returns a list of maps and carries timm's
``feature_info``; ``out_indices`` selects the outputs as in timm.  There is no
classifier head: with or without ``features_only`` the model returns features.

Weights: pass them with ``pretrained_cfg_overlay=dict(file=...)``: an official file's
short name (``'inline://swin_t'``, downloaded once into the weights cache and verified,
as for ``init_cfg``: :mod:`inline_mm.weights`), a URL or a local path.  The file goes
through the project's safe loader (:func:`inline_mm.models.load_pretrained`): official,
converted (safetensors) or mm checkpoints, the same default sub-dict as
``init_cfg=dict(type='Pretrained')`` (``model``, not CSwin's ``state_dict_ema``;
``checkpoint_key=`` picks another), and the same refusal of another variant.  timm's
own loading (``checkpoint_path=``, or a ``file`` through timm's loader) would refuse
the official files: they hold a pickled yacs config, and timm loads with
``weights_only=True``.

Only timm's public API is used (what ``timm.models`` exports): its underscore modules
move between releases.

Name clash: the official InLine repository's classification code registers timm
classifiers under some of these names.  If both are imported, the one imported last
wins (timm warns ``Overwriting ... in registry``).  :func:`create_backbone` builds
ours without going through timm's registry, so it is unaffected.
"""
import re
from typing import List, Optional, Sequence

import torch
import torch.nn as nn
from timm.models import FeatureInfo, register_model, resolve_pretrained_cfg

from .models import FAMILIES, load_pretrained

__all__ = ['InLineFeatures', 'MODEL_NAMES', 'create_backbone', 'model_name']


def model_name(family: str, preset: str) -> str:
    """timm name of a family's preset: ``('InLineSwin', 'tiny')`` -> ``'inline_swin_tiny'``."""
    return f"inline_{re.sub(r'^InLine', '', family).lower()}_{preset}"


class InLineFeatures(nn.Module):
    """An InLine backbone as a timm ``features_only`` model: returns a list of NCHW
    maps (one per ``out_indices``) and describes them in ``feature_info``.

    Args:
        backbone (InLineBackbone): The backbone (``.backbone``).
        strides (Sequence[int]): Output stride of every stage (block) of the backbone.
    """

    def __init__(self, backbone: nn.Module, strides: Sequence[int]):
        super().__init__()
        self.backbone = backbone
        info = [dict(num_chs=int(backbone.dims[i]), reduction=int(strides[i]),
                     module=_feature_module(backbone, i))
                for i in range(len(strides))]
        self.feature_info = FeatureInfo(info, tuple(backbone.out_indices))

    def forward(self, x: torch.Tensor) -> List[torch.Tensor]:
        return list(self.backbone(x))


def _feature_module(backbone: nn.Module, i: int) -> str:
    """Name (from this model) of the module whose output is feature ``i``: the output's
    own LayerNorm ``norm{i}`` where it has one, else the last module stage ``i`` owns
    (InLine-Swin ``layers.i``, -PVT/-CSwin ``stages.i``, -DeiT ``blocks.i``, or the final
    ``norm`` after the last block). timm's hook-based feature wrappers find it by name."""
    norm = getattr(backbone, f'norm{i}', None)
    module = norm if isinstance(norm, nn.Module) else backbone._stage_modules(i)[-1]
    name = next(n for n, m in backbone.named_modules() if m is module)
    return f'backbone.{name}'


def create_backbone(name: str, pretrained: bool = False, file: Optional[str] = None,
                    checkpoint_key: Optional[str] = None, out_indices=None,
                    **kwargs) -> InLineFeatures:
    """Build model ``name`` (see :data:`MODEL_NAMES`) without timm's registry.

    Args:
        name (str): e.g. ``'inline_swin_tiny'``.
        pretrained (bool): Load ``file`` (required then).
        file (str, optional): Official, converted or mm checkpoint: a path, a URL or an
            official file's short name (``'inline://swin_t'``, :mod:`inline_mm.weights`).
        checkpoint_key (str, optional): Sub-dict of the file to load (e.g.
            ``'state_dict_ema'``); default as the OpenMMLab path.
        out_indices (Sequence[int], optional): Outputs; default the backbone's.
        **kwargs: Further backbone arguments (e.g. ``drop_path_rate``).
    """
    if name not in _ENTRIES:
        raise KeyError(f'{name!r} is not an InLine timm model; known: {", ".join(MODEL_NAMES)}')
    family, preset = _ENTRIES[name]
    if out_indices is not None:
        kwargs['out_indices'] = tuple(out_indices)
    backbone = family.cls(arch=preset, **kwargs)
    if pretrained:
        if not file:
            released = [r.name for r in family.checkpoints if r.arch == preset]
            example = f'inline://{released[0]}' if released else 'path/to/checkpoint.pth'
            raise ValueError(f'{name}: pass the weights to load: timm.create_model(..., '
                             f"pretrained=True, pretrained_cfg_overlay=dict(file='{example}'))")
        load_pretrained(backbone, file, checkpoint_key=checkpoint_key)
    else:
        backbone.init_weights()
    return InLineFeatures(backbone.eval(), [family.stride(i) for i in range(backbone.num_stages)])


def _timm_entry(name: str):
    def entry(pretrained: bool = False, pretrained_cfg=None, pretrained_cfg_overlay=None,
              features_only: bool = False, cache_dir=None, **kwargs):
        cfg = resolve_pretrained_cfg(name, pretrained_cfg, pretrained_cfg_overlay)
        kwargs.pop('feature_cfg', None)
        model = create_backbone(name, pretrained=pretrained, file=cfg.file, **kwargs)
        model.pretrained_cfg = model.default_cfg = cfg.to_dict()
        return model

    entry.__name__ = entry.__qualname__ = name
    entry.__module__ = __name__
    entry.__doc__ = f'{name}: InLine backbone features (``inline_mm.timm``).'
    return entry


_ENTRIES = {model_name(f.name, preset): (f, preset)
            for f in FAMILIES.values() for preset in f.presets}
#: every registered model name, e.g. ``inline_swin_tiny``
MODEL_NAMES = tuple(_ENTRIES)

#: timm reads the pretrained configs of this module's entries from here
default_cfgs = {n: dict(url='', file=None, num_classes=0, input_size=(3, 224, 224),
                        mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225),
                        license='mit', paper_ids='arXiv:2412.06590')
                for n in MODEL_NAMES}

for _name in MODEL_NAMES:
    globals()[_name] = register_model(_timm_entry(_name))
