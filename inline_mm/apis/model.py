"""From a config and a checkpoint to a model: the one loader of the app, the attention maps,
deploy and the analysis tools.

:func:`init_model` builds a detector or segmentor with mmdet's ``init_detector`` or mmseg's
``init_model`` (so the model is what the stock inferencers hold: ``model.cfg``, synchronised
BatchNorm reverted, eval mode) and loads the checkpoint itself, with the project's checks: a
whole-model checkpoint must fit the model tensor for tensor (each mismatch named), backbone
weights (an official ImageNet file, a converted file, ``inline://<name>``) go through
:func:`~inline_mm.models.load_pretrained` where the caller accepts them. :func:`init_backbone`
is the same for a backbone alone, from a config or a family name.
"""
import contextlib
import copy
import logging
import warnings
from typing import Optional, Tuple

import torch
import torch.nn as nn

from ..models.checkpoint import CheckpointError, load_pretrained, locate, read_checkpoint
from ..models.families import FAMILIES, model_name
from .config import read_config

__all__ = ['SCOPES', 'init_model', 'init_backbone', 'check_state']

#: the ``default_scope`` of the configs the loader takes, and what their models do
SCOPES = {'mmdet': 'detection', 'mmseg': 'segmentation'}


@contextlib.contextmanager
def _quiet_mmengine():
    """mmengine's logger at WARNING for the block (``init_weights`` logs every tensor)."""
    from mmengine.logging import MMLogger
    logger = MMLogger.get_current_instance()
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


def _build(cfg, scope: str) -> nn.Module:
    """mmdet's ``init_detector`` / mmseg's ``init_model`` without a checkpoint and without
    mmdet's warning that it has none (the loader loads it)."""
    if scope == 'mmdet':
        from mmdet.apis import init_detector as init
    else:
        from mmseg.apis import init_model as init
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        model = init(cfg, None, device='cpu')
    for w in caught:
        # the class names are set below, from the checkpoint or the config's dataset
        if 'checkpoint is None' not in str(w.message):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return model


def check_state(model: nn.Module, state: dict, checkpoint: str, config: str) -> dict:
    """``state`` (``module.`` prefixes dropped) if its tensors fill ``model`` exactly; else
    a :class:`CheckpointError` naming the mismatches (a checkpoint of another model, or of
    the backbone only)."""
    own = model.state_dict()
    state = {k[len('module.'):] if k.startswith('module.') else k: v for k, v in state.items()}
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    shapes = [f'{k}: checkpoint {tuple(state[k].shape)} vs model {tuple(v.shape)}'
              for k, v in own.items() if k in state and hasattr(state[k], 'shape')
              and tuple(state[k].shape) != tuple(v.shape)]
    if not (missing or unexpected or shapes):
        return state
    found = sum(1 for k in own if k in state)
    lines = [f'{checkpoint} does not fit the model of {config}: {found} of its {len(state)} '
             f"tensors have names of the model's {len(own)}"]
    if shapes:
        lines.append(f'{len(shapes)} have other shapes, e.g. ' + '; '.join(shapes[:3]))
    if missing:
        lines.append(f'{len(missing)} of the model\'s are missing, e.g. ' + ', '.join(missing[:3]))
    if unexpected:
        lines.append(f'{len(unexpected)} are not the model\'s, e.g. ' + ', '.join(unexpected[:3]))
    if found and all(k.startswith('backbone.') for k in own if k in state) and missing:
        lines.append('it holds a backbone only (ImageNet weights?): give a checkpoint of the '
                     'trained detector or segmentor')
    lines.append('pass the config the checkpoint was trained with')
    raise CheckpointError('; '.join(lines))


def _dataset_meta(model: nn.Module, cfg, checkpoint_meta: Optional[dict]) -> dict:
    """Class names and palette: the checkpoint's, else the config's test dataset's."""
    meta = {}
    try:
        from mmengine.registry import DATASETS, init_default_scope
        init_default_scope(cfg.default_scope)
        dataset = copy.deepcopy(cfg.test_dataloader.dataset)
        dataset['lazy_init'] = True
        meta.update(DATASETS.build(dataset).metainfo)
    except Exception as e:      # a dataset that cannot be built without its files
        logging.getLogger(__name__).info('class names not read from the config (%s)', e)
    meta.update(checkpoint_meta or {})
    return {k.lower(): v for k, v in meta.items()}


def init_model(config, checkpoint: Optional[str] = None, device: str = 'cpu',
               cfg_options: Optional[dict] = None, *, backbone_weights: bool = False,
               seed: Optional[int] = None, init_weights: bool = False) -> nn.Module:
    """The model of an mmdet / mmseg config, in eval mode on ``device``.

    Args:
        config (str | Config): The config (:func:`~.config.read_config`).
        checkpoint (str, optional): A checkpoint of the whole model (``state_dict`` of a
            trained detector or segmentor: every tensor must fit). With
            ``backbone_weights=True`` also backbone weights: an official ImageNet file, a
            converted file, ``inline://<name>`` or a ``state_dict`` of ``backbone.`` keys only,
            loaded into ``model.backbone`` (the rest stays as built). None: the weights the
            model is built with. The backbone's ``init_cfg`` is never applied.
        device (str): Where the model goes. Default: ``'cpu'``.
        cfg_options (dict, optional): Merged into the config.
        backbone_weights (bool): Accept backbone weights (see ``checkpoint``).
        seed (int, optional): ``torch.manual_seed`` before the build (the build draws weights).
        init_weights (bool): Run mmengine's ``init_weights()`` before the checkpoint is
            loaded (the configs' initialisation of the parts it does not hold).

    ``model.cfg`` is the config; ``model.dataset_meta`` the class names (and palette) of the
    checkpoint, else of the config's test dataset; ``model.weights`` says what was loaded:
    ``'whole'``, ``'backbone'`` or ``'random'``.
    """
    cfg = read_config(config, cfg_options)
    scope = cfg.get('default_scope')
    if scope not in SCOPES:
        raise ValueError(f'{getattr(cfg, "filename", "the config")}: default_scope={scope!r}; '
                         "expected 'mmdet' (detection) or 'mmseg' (segmentation)")
    if cfg.model.get('backbone') is not None:
        cfg.model.backbone.init_cfg = None      # no ImageNet download while building
    if seed is not None:
        torch.manual_seed(seed)
    model = _build(cfg, scope)
    if init_weights:
        with _quiet_mmengine():
            model.init_weights()
    where = getattr(cfg, 'filename', None) or 'the config'
    model.weights, meta = 'random', None
    if checkpoint is not None:
        ckpt = read_checkpoint(locate(checkpoint))
        if isinstance(ckpt.get('state_dict'), dict):
            state = ckpt['state_dict']
        elif isinstance(ckpt.get('model'), dict):
            state = None                        # an ImageNet classifier's file
        else:
            state = ckpt
        whole = state is not None and any(
            not k.startswith(('backbone.', 'module.backbone.')) for k in state)
        if whole or not backbone_weights:
            if state is None:
                raise CheckpointError(
                    f'{checkpoint} is an official ImageNet classification file, not a trained '
                    'detector or segmentor: train the config first (or export the backbone '
                    'alone)')
            model.load_state_dict(check_state(model, state, checkpoint, where))
            model.weights, meta = 'whole', (ckpt.get('meta') or {}).get('dataset_meta')
        else:
            load_pretrained(model.backbone, checkpoint)
            model.weights = 'backbone'
    model.dataset_meta = _dataset_meta(model, cfg, meta)
    return model.to(device).eval()


def _family_and_args(name: str, arch: str) -> Tuple[str, dict]:
    if name in FAMILIES:
        family = FAMILIES[name]
        if arch == 'smoke':
            return name, dict(family.smoke)
        if arch not in family.presets:
            raise ValueError(f'{name} has no arch {arch!r}; choose one of '
                             f'{sorted(family.presets)} or smoke')
        return name, dict(arch=arch)
    known = {model_name(fam, preset): (fam, preset)
             for fam, family in FAMILIES.items() for preset in list(family.presets) + ['smoke']}
    if name not in known:
        raise ValueError(f'unknown backbone {name!r}: give a family ({", ".join(FAMILIES)}) '
                         'with an arch, or a timm-style name such as '
                         f'{", ".join(sorted(known)[:4])}, ...')
    return _family_and_args(*known[name])


def init_backbone(config=None, model: Optional[str] = None, arch: str = 'tiny',
                  checkpoint: Optional[str] = None, cfg_options: Optional[dict] = None,
                  seed: Optional[int] = None) -> Tuple[nn.Module, object]:
    """An InLine backbone in eval mode, and the config (None without one).

    Args:
        config (str | Config, optional): An mmdet/mmseg config: its ``model.backbone`` is
            built (its ``init_cfg`` kept on the module, not applied).
        model (str, optional): Instead of a config: a family name (``'InLineSwin'``) with
            ``arch`` (a preset, or ``'smoke'``: the family's tiny test model), or a timm-style
            name (``'inline_swin_tiny'``).
        arch (str): See ``model``. Default: ``'tiny'``.
        checkpoint (str, optional): Weights loaded by
            :func:`~inline_mm.models.load_pretrained` (official, converted, ``inline://``, or
            a trained model's ``backbone.`` keys), which refuses a file of another variant.
        cfg_options (dict, optional): Merged into the config.
        seed (int, optional): ``torch.manual_seed`` before the build.
    """
    if (config is None) == (model is None):
        raise ValueError('give either a config file or a backbone name')
    cfg = None
    if config is not None:
        cfg = read_config(config, cfg_options)
        args = dict(cfg.model.backbone)
        name = args.pop('type')
        if name not in FAMILIES:
            raise ValueError(f'{getattr(cfg, "filename", config)}: its backbone {name!r} is not '
                             f'an InLine backbone ({", ".join(FAMILIES)})')
    else:
        name, args = _family_and_args(model, arch)
    if seed is not None:
        torch.manual_seed(seed)
    backbone = FAMILIES[name].cls(**args)
    if checkpoint is not None:
        load_pretrained(backbone, checkpoint)
    return backbone.eval(), cfg
