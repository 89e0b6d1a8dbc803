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

* ``timm.create_model(name)`` is the official classifier, :class:`InLineClassifier`: the
  OpenMMLab backbone (same class, same weights) with the official head around it (final
  norm where the official model has one, global pooling -- the mean of the last map, the
  class token for InLine-DeiT -- and ``head``).  timm's classifier API: ``num_classes``
  (0: pooled features), ``global_pool``, ``reset_classifier``, ``get_classifier``,
  ``forward_features`` / ``forward_head`` / ``forward``, ``forward_intermediates``,
  ``feature_info``, ``set_grad_checkpointing``, and ``pretrained_cfg`` with the official
  URL, mean/std, input size and crop (the official evaluation: bicubic resize of the
  square image to ``size / 0.875``, centre crop).
* ``features_only=True`` is the backbone as the OpenMMLab configs use it,
  :class:`InLineFeatures`: a list of maps (each through its output norm, padding-aware),
  ``out_indices`` as in timm, ``feature_info`` naming the module that gives each output.
  (``feature_cls='getter'`` gives the classifier's ``forward_intermediates`` instead.)
  Before the classifiers this was what every name built; code that used the names as
  backbones adds ``features_only=True``.

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
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from timm.models import FeatureInfo, adapt_input_conv, register_model, resolve_pretrained_cfg

from .models import load_pretrained
from .models.families import model_name, on_variant
from .models.layers import run_block, to_nchw

__all__ = ['InLineClassifier', 'InLineFeatures', 'InLineIntermediates', 'MODEL_NAMES',
           'create_backbone', 'create_classifier', 'model_name']


def _take_indices(n: int, indices: Optional[Union[int, Sequence[int]]]) -> List[int]:
    """timm's meaning of ``indices``: None all ``n``, an int the last that many, a
    sequence those (negative from the end)."""
    if indices is None:
        indices = n
    if isinstance(indices, int):
        if not 0 < indices <= n:
            raise ValueError(f'indices={indices}: the model has {n} feature levels')
        return list(range(n - indices, n))
    taken = [i + n if i < 0 else i for i in indices]
    if not taken or any(not 0 <= i < n for i in taken):
        raise ValueError(f'indices {list(indices)} must be within -{n}..{n - 1}')
    return taken


def _stage_output_module(backbone: nn.Module, i: int) -> nn.Module:
    """The last block of stage (block) ``i``: its output is the stage's tokens."""
    stage = backbone._stage_list()[i]
    return stage.blocks[-1] if hasattr(stage, 'blocks') else stage


def _module_name(root: nn.Module, module: nn.Module, prefix: str = '') -> str:
    return prefix + next(n for n, m in root.named_modules() if m is module)


class InLineClassifier(nn.Module):
    """An official InLine ImageNet classifier: the backbone, the official final norm,
    global pooling and a linear ``head``, with timm's classifier API.

    The backbone returns only its last stage (``out_indices=(last,)``), through the
    output norm the official final ``norm`` initialises (InLine-Swin, -CSwin; InLine-PVT
    has no final norm, so none); InLine-DeiT's class token and ``norm`` are read from
    its blocks directly, as its backbone returns patch maps only.

    Args:
        backbone (InLineBackbone): Built with ``out_indices`` = its last stage.
        family (Family): Its entry of :data:`inline_mm.models.FAMILIES`.
        num_classes (int): Classes of ``head``; 0: no head (pooled features).
            Default: 1000.
        global_pool (str, optional): ``'avg'`` (mean of the last map; the official
            pooling of the pyramids), ``'max'``, ``'token'`` (InLine-DeiT's class
            token, its official pooling) or ``''`` (none: ``forward`` returns the
            unpooled features). Default: the official pooling.
        drop_rate (float): Dropout before ``head``. Default: 0.
    """

    def __init__(self, backbone: nn.Module, family, num_classes: int = 1000,
                 global_pool: Optional[str] = None, drop_rate: float = 0.):
        super().__init__()
        last = backbone.num_stages - 1
        if tuple(backbone.out_indices) != (last,):
            raise ValueError(f'the classifier reads the last stage only: build the backbone '
                             f'with out_indices=({last},), got {backbone.out_indices}')
        self.backbone = backbone
        self.tokens = family.out_unit == 'block'
        if self.tokens and not backbone.final_norm:
            raise ValueError('the InLine-DeiT classifier needs the final norm (final_norm=True)')
        # The final norm is the backbone's (official keys); a name, not a second registration.
        if self.tokens:
            self._final_norm = 'norm'
        elif backbone.official_final_norm:
            self._final_norm = f'norm{last}'
        else:
            # InLine-PVT: the official classifier pools the last block's tokens as they are.
            setattr(backbone, f'norm{last}', nn.Identity())
            self._final_norm = None
        self.num_features = self.head_hidden_size = int(backbone.dims[-1])
        self.num_classes = num_classes
        self.drop_rate = drop_rate
        official_pool = 'token' if self.tokens else 'avg'
        self.global_pool = self._check_pool(official_pool if global_pool is None else global_pool)
        self.head_drop = nn.Dropout(drop_rate)
        self.head = nn.Linear(self.num_features, num_classes) if num_classes else nn.Identity()
        self._stem = f'backbone.{family.first_conv}.weight'
        strides = backbone.stage_strides()
        self._taps = [_stage_output_module(backbone, i) for i in range(backbone.num_stages)]
        self.feature_info = [dict(num_chs=int(backbone.dims[i]), reduction=int(strides[i]),
                                  module=_module_name(backbone, m, 'backbone.'))
                             for i, m in enumerate(self._taps)]
        if not self.tokens:
            self.output_fmt = 'NCHW'

    def _check_pool(self, pool: str) -> str:
        allowed = ('token', 'avg', '') if self.tokens else ('avg', 'max', '')
        if pool not in allowed:
            raise ValueError(f'global_pool={pool!r}: choose one of {allowed}')
        return pool

    # ------------------------------------------------------------------ timm's API
    def get_classifier(self) -> nn.Module:
        return self.head

    def reset_classifier(self, num_classes: int, global_pool: Optional[str] = None):
        self.num_classes = num_classes
        if global_pool is not None:
            self.global_pool = self._check_pool(global_pool)
        self.head = nn.Linear(self.num_features, num_classes) if num_classes else nn.Identity()

    @torch.jit.ignore
    def set_grad_checkpointing(self, enable: bool = True):
        self.backbone.with_cp = enable

    @torch.jit.ignore
    def no_weight_decay(self) -> set:
        """The backbone's :meth:`~inline_mm.models.base.InLineBackbone.no_weight_decay`
        (norms, position tables, the class token, relative position biases), named from
        this model."""
        return {f'backbone.{n}' for n in self.backbone.no_weight_decay()}

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, C, H, W)`` map of the last stage after the final norm; InLine-DeiT:
        ``(B, 1 + H*W, C)`` tokens after ``norm``, class token first."""
        if not self.tokens:
            return self.backbone(x)[-1]
        b = self.backbone
        x, valid = b.prepare_input(x)
        x, hw, valid = b.embed(x, valid)
        for blk in b.blocks:
            x = run_block(blk, x, hw, blk.with_cp, valid)
        return b.norm(x)

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        if self.global_pool == 'token':
            x = x[:, 0]
        elif self.global_pool == 'avg':
            x = x[:, 1:].mean(1) if self.tokens else x.mean((2, 3))
        elif self.global_pool == 'max':
            x = x.amax((2, 3))
        x = self.head_drop(x)
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))

    def forward_intermediates(self, x: torch.Tensor,
                              indices: Optional[Union[int, Sequence[int]]] = None,
                              norm: bool = False, stop_early: bool = False,
                              output_fmt: str = 'NCHW', intermediates_only: bool = False):
        """timm's ``forward_intermediates``: the tokens leaving the last block of each
        stage in ``indices`` (InLine-DeiT: each block; its class token dropped) as
        ``NCHW`` (or ``NHWC``) maps, before any norm; ``norm=True`` passes the last
        stage's through the final norm. Returns ``(forward_features(x), maps)``, or the
        maps alone with ``intermediates_only``. (``stop_early`` is accepted; the whole
        model runs.)"""
        if output_fmt not in ('NCHW', 'NHWC'):
            raise ValueError(f"output_fmt must be 'NCHW' or 'NHWC', got {output_fmt!r}")
        take = _take_indices(len(self._taps), indices)
        seen: Dict[int, Tuple[torch.Tensor, Tuple[int, int]]] = {}
        # The blocks are called as block(x, hw, valid): the hook sees each map's size.
        hooks = [self._taps[i].register_forward_hook(
            lambda m, args, out, i=i: seen.__setitem__(i, (out, tuple(args[1]))))
            for i in take]
        try:
            final = self.forward_features(x)
        finally:
            for h in hooks:
                h.remove()
        maps = []
        last = len(self._taps) - 1
        for i in take:
            tokens, hw = seen[i]
            tokens = tokens[:, tokens.shape[1] - hw[0] * hw[1]:]      # DeiT: no class token
            if norm and i == last and self._final_norm is not None:
                tokens = getattr(self.backbone, self._final_norm)(tokens)
            fmap = to_nchw(tokens, hw)
            maps.append(fmap.permute(0, 2, 3, 1) if output_fmt == 'NHWC' else fmap)
        return maps if intermediates_only else (final, maps)

    def prune_intermediate_layers(self, indices: Union[int, Sequence[int]] = 1,
                                  prune_norm: bool = False, prune_head: bool = True):
        """timm's hook for feature extraction: drops the head (``prune_head``) and
        returns the absolute indices. The stages are kept (they are cheap to keep and
        the backbone's key names stay those of the official files)."""
        if prune_head:
            self.reset_classifier(0, '')
        return _take_indices(len(self._taps), indices)

    # ------------------------------------------------------------------ weights
    @property
    def arch_name(self) -> str:
        return self.backbone.arch_name

    def fresh_keys(self) -> List[str]:
        return []

    def convert_checkpoint(self, state: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """An official classifier's state dict (or one of this class, or of the backbone)
        -> this model's keys: the backbone's converter and checks for the body, ``head``
        kept where it fits ``num_classes``, the stem adapted to ``in_chans``."""
        plain = {k[len('backbone.'):] if k.startswith('backbone.') else k: v
                 for k, v in state.items()}
        head = {k: v for k, v in plain.items() if k.startswith('head.')}
        body = self.backbone.convert_checkpoint(
            {k: v for k, v in plain.items() if not k.startswith('head.')})
        own = self.state_dict()
        out = {f'backbone.{k}': v for k, v in body.items()}
        stem = self._stem
        if stem in out and out[stem].shape[1] != own[stem].shape[1]:
            out[stem] = adapt_input_conv(own[stem].shape[1], out[stem])
        if self.num_classes and head.get('head.weight') is not None \
                and head['head.weight'].shape == own['head.weight'].shape:
            out.update(head)
        return out


class InLineFeatures(nn.Module):
    """An InLine backbone as a timm ``features_only`` model: returns a list of NCHW
    maps (one per ``out_indices``) and describes them in ``feature_info``.

    Args:
        backbone (InLineBackbone): The backbone (``.backbone``); every stage's entry is
            its ``stage_info`` (the backbone's ``feature_info`` lists its outputs), the
            module named from this model.
    """

    def __init__(self, backbone: nn.Module):
        super().__init__()
        self.backbone = backbone
        info = [backbone.stage_info(i) for i in range(backbone.num_stages)]
        for entry in info:
            entry['module'] = f'backbone.{entry["module"]}'
        self.feature_info = FeatureInfo(info, tuple(backbone.out_indices))

    def forward(self, x: torch.Tensor) -> List[torch.Tensor]:
        return list(self.backbone(x))


class InLineIntermediates(nn.Module):
    """``features_only=True, feature_cls='getter'``: the classifier's
    :meth:`InLineClassifier.forward_intermediates` at ``out_indices`` (raw stage maps;
    ``norm=True`` passes the last through the final norm), head removed."""

    def __init__(self, model: InLineClassifier, out_indices: Sequence[int],
                 norm: bool = False, output_fmt: str = 'NCHW'):
        super().__init__()
        self.out_indices = model.prune_intermediate_layers(list(out_indices))
        self.model, self.norm, self.output_fmt = model, norm, output_fmt
        self.feature_info = FeatureInfo(model.feature_info, tuple(self.out_indices))

    def forward(self, x: torch.Tensor) -> List[torch.Tensor]:
        return self.model.forward_intermediates(x, self.out_indices, norm=self.norm,
                                                output_fmt=self.output_fmt,
                                                intermediates_only=True)


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
                    **kwargs) -> InLineFeatures:
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
    return InLineFeatures(backbone.eval())


def create_classifier(name: str, pretrained: bool = False, file: Optional[str] = None,
                      checkpoint_key: Optional[str] = None, num_classes: int = 1000,
                      global_pool: Optional[str] = None, drop_rate: float = 0.,
                      strict: bool = True, **kwargs) -> InLineClassifier:
    """Build model ``name`` as the official classifier (what ``timm.create_model(name)``
    builds), without timm's registry.

    Args:
        name, pretrained, file, checkpoint_key: As :func:`create_backbone`.
        num_classes (int): Classes; 0 for pooled features. A file's head of another
            size is not loaded. Default: 1000.
        global_pool (str, optional): See :class:`InLineClassifier`.
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
    model = InLineClassifier(backbone, family, num_classes, global_pool, drop_rate)
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
                model = InLineIntermediates(model, out_indices or default, **(feature_cfg or {}))
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
