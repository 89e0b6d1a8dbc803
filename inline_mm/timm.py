"""The InLine models for timm: the official ImageNet classifiers, and dense features.

    import timm
    import inline_mm.timm  # registers inline_swin_tiny, inline_pvt_small, ...
    model = timm.create_model('inline_swin_tiny', pretrained=True)   # the official classifier
    logits = model(images)                                           # (B, 1000)
    cfg = timm.data.resolve_data_config({}, model=model)              # its eval transform

    backbone = timm.create_model('inline_swin_tiny', pretrained=True, features_only=True)
    backbone.feature_info.channels()   # [96, 192, 384, 768]
    features = backbone(images)        # list of NCHW maps, as the OpenMMLab backbone gives

Needs torch and timm only: with mmengine/mmcv/mmdet/mmseg absent, ``import
inline_mm.timm`` works (``inline_mm`` then registers nothing in OpenMMLab).

One model name per variant of a family of :data:`inline_mm.models.FAMILIES`:
``inline_<family>_<preset>`` (``inline_swin_tiny``, ``inline_pvt_medium``,
``inline_cswin_base``, ...; :data:`MODEL_NAMES` lists them), each with the official file
of that variant (its ``Variant`` at the end of the family's file; a variant declared
after this import gets its name too).

* ``timm.create_model(name)`` is the official classifier,
  :class:`~inline_mm.models.InLineClassifier`: the OpenMMLab backbone (same class, same
  weights) with the official head around it (final norm where the official model has one,
  global pooling -- the mean of the last map, the class token for InLine-DeiT -- and
  ``head``).  timm's classifier API: ``num_classes`` (0: pooled features), ``global_pool``,
  ``reset_classifier``, ``get_classifier``, ``forward_features`` / ``forward_head`` /
  ``forward``, ``forward_intermediates``, ``feature_info``, ``set_grad_checkpointing``, and
  ``pretrained_cfg`` with the official URL, mean/std, input size and crop (the official
  evaluation: bicubic resize of the square image to ``size / 0.875``, centre crop).
* ``features_only=True`` is the backbone as the OpenMMLab configs use it,
  :class:`~inline_mm.models.InLineFeatures`: a list of maps (each through its output norm,
  padding-aware), ``out_indices`` as in timm, ``feature_info`` naming the module that gives
  each output.  (``feature_cls='getter'`` gives the classifier's ``forward_intermediates``
  instead: :class:`~inline_mm.models.InLineIntermediates`.)  Before the classifiers this was
  what every name built; code that used the names as backbones adds ``features_only=True``.

The networks are in :mod:`inline_mm.models.classifier`; this module names, builds and
registers them.

Weights: ``pretrained=True`` loads the official file of the preset through the project's
resolver (:mod:`inline_mm.models.weights`: ``inline://<file>``, looked for in ``checkpoints/``
and the cache, downloaded once and verified); ``pretrained_cfg_overlay=dict(file=...)``
loads another (a short name, a URL or a local path; official, converted or mm
checkpoints).  The file goes through the project's safe loader
(:func:`inline_mm.models.load_pretrained`): the same default sub-dict as
``init_cfg=dict(type='Pretrained')`` (``model``, not CSwin's ``state_dict_ema``;
``checkpoint_key=`` picks another), the same refusal of another variant, and, with
``pretrained_strict=True`` (the default), an error for any key the model or the file has
that the other lacks.  ``num_classes`` other than the file's drops its head; ``in_chans``
other than 3 adapts the stem as timm does (``timm.models.adapt_input_conv``).  timm's
own loading (``checkpoint_path=``) would refuse the official files: they hold a pickled
yacs config, and timm loads with ``weights_only=True``.

Only timm's public API is used (what ``timm.models`` and ``timm.layers`` export): its
underscore modules move between releases.

Name clash: the official InLine repository's classification code registers timm
classifiers under some of these names.  If both are imported, the one imported last
wins (timm warns ``Overwriting ... in registry``).  :func:`create_backbone` and
:func:`create_classifier` build ours without going through timm's registry, so they are
unaffected.
"""
from typing import Dict, Optional, Tuple

import torch.nn as nn
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from timm.models import register_model, resolve_pretrained_cfg

from .models import classifier, load_pretrained
from .models.families import model_name, on_variant
from .version import moved_attribute

__all__ = ['MODEL_NAMES', 'create_backbone', 'create_classifier', 'model_name']


def __getattr__(name: str):
    # 0.1.x's `from inline_mm.timm import InLineClassifier` (inline_mm.version.MOVED_NAMES);
    # the classes are not bound here, so that reading them from here warns.
    return moved_attribute(__name__, name)


def _entry(name: str):
    if name not in _ENTRIES:
        raise KeyError(f'{name!r} is not an InLine timm model; known: {", ".join(MODEL_NAMES)}')
    return _ENTRIES[name]


def _check_arguments(name: str, family, kwargs: dict):
    """Refuse an argument neither timm's entry nor the backbone takes, by name."""
    known = set(family.cls.arguments()) - {'arch'}
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise TypeError(f'{name}: unknown argument(s) {", ".join(unknown)}; timm arguments: '
                        'pretrained, num_classes, global_pool, in_chans, drop_rate, '
                        'drop_path_rate, pretrained_strict, features_only, out_indices, '
                        f'pretrained_cfg_overlay; backbone arguments: {", ".join(sorted(known))}')


def _default_file(name: str, family, preset: str) -> str:
    if not family.variants[preset].weights:
        raise ValueError(f'{name}: no official file; pass one: timm.create_model(..., '
                         "pretrained=True, pretrained_cfg_overlay=dict(file='path/to/file.pth'))")
    return f'inline://{family.variants[preset].weights}'


def create_backbone(name: str, pretrained: bool = False, file: Optional[str] = None,
                    checkpoint_key: Optional[str] = None, out_indices=None,
                    **kwargs) -> classifier.InLineFeatures:
    """Build model ``name`` (see :data:`MODEL_NAMES`) as a dense-feature backbone
    (what ``timm.create_model(name, features_only=True)`` builds), without timm's registry.

    Args:
        name (str): e.g. ``'inline_swin_tiny'``.
        pretrained (bool): Load ``file``.
        file (str, optional): Official, converted or mm checkpoint: a path, a URL or an
            official file's short name (``'inline://swin_t'``, :mod:`inline_mm.models.weights`).
            Default: the preset's official file.
        checkpoint_key (str, optional): Sub-dict of the file to load (e.g.
            ``'state_dict_ema'``); default as the OpenMMLab path.
        out_indices (Sequence[int], optional): Outputs; default the backbone's.
        **kwargs: Further backbone arguments (e.g. ``drop_path_rate``, ``in_channels``).
    """
    family, preset = _entry(name)
    _check_arguments(name, family, kwargs)
    if out_indices is not None:
        kwargs['out_indices'] = tuple(out_indices)
    backbone = family.cls(arch=preset, **kwargs)
    if pretrained:
        load_pretrained(backbone, file or _default_file(name, family, preset),
                        checkpoint_key=checkpoint_key)
    else:
        backbone.init_weights()
    return classifier.InLineFeatures(backbone.eval())


def create_classifier(name: str, pretrained: bool = False, file: Optional[str] = None,
                      checkpoint_key: Optional[str] = None, num_classes: int = 1000,
                      global_pool: Optional[str] = None, drop_rate: float = 0.,
                      strict: bool = True, **kwargs) -> classifier.InLineClassifier:
    """Build model ``name`` as the official classifier (what ``timm.create_model(name)``
    builds), without timm's registry.

    Args:
        name, pretrained, file, checkpoint_key: As :func:`create_backbone`.
        num_classes (int): Classes; 0 for pooled features. A file's head of another
            size is not loaded. Default: 1000.
        global_pool (str, optional): See :class:`~inline_mm.models.InLineClassifier`.
        drop_rate (float): Dropout before the head. Default: 0.
        strict (bool): Refuse a file that leaves a tensor of the model unset or holds
            one the model does not use. Default: True.
        **kwargs: Further backbone arguments (``drop_path_rate``, ``in_channels``, ...).
            The classifier is not padding-aware unless ``pad_aware=True`` is passed:
            a classified image is never a padded batch, and an image's own black border
            must not be taken for padding.
    """
    family, preset = _entry(name)
    _check_arguments(name, family, kwargs)
    if 'out_indices' in kwargs:
        raise TypeError(f'{name}: out_indices is for features_only=True (the classifier reads '
                        'the last stage)')
    kwargs.setdefault('pad_aware', False)
    backbone = family.cls(arch=preset, out_indices=(_num_stages(family, preset, kwargs) - 1,),
                          **kwargs)
    model = classifier.InLineClassifier(backbone, family, num_classes, global_pool, drop_rate)
    if pretrained:
        report = load_pretrained(model, file or _default_file(name, family, preset),
                                 checkpoint_key=checkpoint_key)
        problems = [f'{len(report[k])} {k} ({", ".join(report[k][:4])})'
                    for k in ('missing', 'unexpected') if report[k]]
        head_left = [k for k in report['missing'] if k.startswith('head.')]
        # Another number of classes than the official 1000 starts a new head (timm's
        # behaviour); with 1000, a file without the head is incomplete.
        if num_classes not in (0, 1000) and head_left \
                and len(head_left) == len(report['missing']):
            nn.init.trunc_normal_(model.head.weight, std=.02)
            nn.init.zeros_(model.head.bias)
            problems = [] if not report['unexpected'] else problems
        if strict and problems:
            raise RuntimeError(f'{name}: the file does not fit the classifier exactly: '
                               f'{"; ".join(problems)} (pretrained_strict=False loads it anyway)')
    else:
        backbone.init_weights()
        if num_classes:
            nn.init.trunc_normal_(model.head.weight, std=.02)
            nn.init.zeros_(model.head.bias)
    return model.eval()


def _num_stages(family, preset: str, kwargs: dict) -> int:
    if family.out_unit == 'block':
        return int(kwargs.get('depth') or family.presets[preset]['depth'])
    return len(kwargs.get('depths') or family.presets[preset]['depths'])


# timm's argument names -> the backbone's
_TIMM_TO_BACKBONE = {'in_chans': 'in_channels'}


def _timm_entry(name: str):
    def entry(pretrained: bool = False, pretrained_cfg=None, pretrained_cfg_overlay=None,
              features_only: bool = False, cache_dir=None, pretrained_strict: bool = True,
              num_classes: Optional[int] = None, global_pool: Optional[str] = None,
              drop_rate: float = 0., feature_cls: Optional[str] = None,
              feature_cfg: Optional[dict] = None, out_indices=None, **kwargs):
        cfg = resolve_pretrained_cfg(name, pretrained_cfg, pretrained_cfg_overlay)
        if cache_dir is not None:
            raise ValueError(f'{name}: cache_dir is not used by the InLine models; their files '
                             'are cached in $INLINE_MM_WEIGHTS (see inline_mm.models.weights)')
        # An overlaid url other than the official one is loaded (the official one is the
        # preset's short name, which the resolver also finds in checkpoints/).
        file = cfg.file or (cfg.url if cfg.url != default_cfgs[name]['url'] else None)
        for timm_key, ours in _TIMM_TO_BACKBONE.items():
            if timm_key in kwargs:
                kwargs[ours] = kwargs.pop(timm_key)
        checkpoint_key = kwargs.pop('checkpoint_key', None)
        if features_only and feature_cls != 'getter':
            if drop_rate:
                kwargs['drop_rate'] = drop_rate     # the backbone's own dropout
            model = create_backbone(name, pretrained=pretrained, file=file,
                                    checkpoint_key=checkpoint_key, out_indices=out_indices,
                                    **kwargs)
        else:
            if out_indices is not None and not features_only:
                raise TypeError(f'{name}: out_indices is for features_only=True (the classifier '
                                'reads the last stage)')
            if feature_cls not in (None, 'getter'):
                raise ValueError(f"{name}: feature_cls={feature_cls!r}; the InLine models "
                                 "offer the default (the backbone) and 'getter'")
            model = create_classifier(
                name, pretrained=pretrained, file=file, checkpoint_key=checkpoint_key,
                num_classes=cfg.num_classes if num_classes is None else num_classes,
                global_pool=global_pool, drop_rate=drop_rate, strict=pretrained_strict,
                **kwargs)
            if features_only:
                # the backbone's default outputs (every stage; InLine-DeiT's blocks 2, 5, 8, 11)
                family, _ = _entry(name)
                default = family.cls.default_out_indices or range(model.backbone.num_stages)
                model = classifier.InLineIntermediates(model, out_indices or default,
                                                       **(feature_cfg or {}))
        model.pretrained_cfg = model.default_cfg = cfg.to_dict()
        return model

    entry.__name__ = entry.__qualname__ = name
    entry.__module__ = __name__
    entry.__doc__ = f'{name}: the official InLine ImageNet classifier (``inline_mm.timm``).'
    return entry


def _pretrained_cfg(family, variant) -> dict:
    """The official file and evaluation of a variant: ImageNet mean/std, the training size
    (InLine-DeiT-S/B: 288/448), bicubic resize of the whole image to ``size / 0.875``
    (``crop_mode='squash'``: the official ``Resize((s, s))``), centre crop."""
    size = variant.model_args.get('pretrain_img_size', 224)
    return dict(url=variant.url if variant.weights else '', file=None, num_classes=1000,
                input_size=(3, size, size),
                pool_size=None if family.out_unit == 'block' else (size // 32, size // 32),
                crop_pct=0.875, crop_mode='squash', interpolation='bicubic',
                fixed_input_size=False, min_input_size=(3, family.min_input_size,
                                                        family.min_input_size),
                mean=IMAGENET_DEFAULT_MEAN, std=IMAGENET_DEFAULT_STD,
                first_conv=f'backbone.{family.first_conv}', classifier='head',
                license='mit', paper_ids='arXiv:2412.06590',
                paper_name='Bridging the Divide: Reconsidering Softmax and Linear Attention',
                origin_url='https://github.com/LeapLabTHU/InLine')


#: timm name -> (family, preset) of every registered model
_ENTRIES: Dict[str, tuple] = {}
#: every registered model name, e.g. ``inline_swin_tiny``
MODEL_NAMES: Tuple[str, ...] = ()
#: timm reads the pretrained configs of this module's entries from here
default_cfgs: Dict[str, dict] = {}


def _register(family, variant):
    """A variant's timm model: its name, pretrained cfg and entry point."""
    global MODEL_NAMES
    name = model_name(family.name, variant.arch)
    _ENTRIES[name] = (family, variant.arch)
    MODEL_NAMES = tuple(_ENTRIES)
    default_cfgs[name] = _pretrained_cfg(family, variant)
    globals()[name] = register_model(_timm_entry(name))


# every variant declared in the families' files, and any declared later
on_variant(_register)
