"""Where a config enters inline_mm: :func:`read_config` (a path or a ``Config``, with
``--cfg-options`` merged), and the ``type`` names of a config that no registry knows, found
before a run starts (:func:`unknown_types`).

mmengine builds each part of a run when the runner reaches it, so a misspelt
``type='InLineSwinn'`` surfaces as the registry's bare ``KeyError`` (after the
dataset was built, for a hook or metric perhaps hours in). :func:`unknown_types`
walks the config instead: every dict with a string ``type`` is looked up, with
mmengine's own ``Registry.get`` (scoped names such as ``'mmdet.CocoDataset'``, parent
registries and lazy imports included), under the config's ``default_scope``.

What a dict is (a model, a dataset, a data transform, ...) is read from where it
sits (:data:`ROLES`) and picks the registry the message names and suggestions come
from. A name is reported only when *no* registry of the scope knows it: parts of a
model's config that live elsewhere (``assigner`` in ``TASK_UTILS``, ``init_cfg`` in
``WEIGHT_INITIALIZERS``) never raise a false alarm. Types given as classes (the
lazy-import config style) are the objects themselves and are skipped.
"""
import difflib
import importlib
import os
from typing import Iterator, List, Optional, Tuple

import mmengine.registry
from mmengine.config import Config
from mmengine.registry import DefaultScope, Registry

__all__ = ['read_config', 'ROLES', 'unknown_types', 'check_types']


def read_config(config, cfg_options: Optional[dict] = None) -> Config:
    """``config`` as a ``Config``: a path is read (its ``custom_imports`` imported), a
    ``Config`` taken as it is; ``cfg_options`` (``--cfg-options`` as a dict) merged into it.
    A missing file is a ``FileNotFoundError`` naming it."""
    if not isinstance(config, Config):
        if not os.path.isfile(str(config)):
            raise FileNotFoundError(f'config not found: {str(config)!r}')
        config = Config.fromfile(str(config))
    if cfg_options:
        config.merge_from_dict(cfg_options)
    return config

#: config key -> registry (attribute of ``<scope>.registry``) of the dicts under it;
#: keys not listed keep the role of their parent
ROLES = {
    'model': 'MODELS', 'tta_model': 'MODELS',
    'dataset': 'DATASETS', 'datasets': 'DATASETS',
    'pipeline': 'TRANSFORMS', 'transforms': 'TRANSFORMS',
    'train_pipeline': 'TRANSFORMS', 'test_pipeline': 'TRANSFORMS', 'tta_pipeline': 'TRANSFORMS',
    'batch_sampler': 'DATA_SAMPLERS',
    'val_evaluator': 'METRICS', 'test_evaluator': 'METRICS',
    'default_hooks': 'HOOKS', 'custom_hooks': 'HOOKS',
    'optim_wrapper': 'OPTIM_WRAPPERS', 'optimizer': 'OPTIMIZERS',
    'param_scheduler': 'PARAM_SCHEDULERS',
    'visualizer': 'VISUALIZERS', 'vis_backends': 'VISBACKENDS',
    'log_processor': 'LOG_PROCESSORS', 'model_wrapper_cfg': 'MODEL_WRAPPERS',
    'init_cfg': 'WEIGHT_INITIALIZERS',
}
#: top-level keys whose own ``type`` is a loop (inside ``model`` they are no such thing)
_LOOPS = ('train_cfg', 'val_cfg', 'test_cfg')
#: keys whose ``type`` names something other than a registered class: mmcv's NMS
#: functions (``nms=dict(type='nms')``) and RoI ops (mmdet's RoI extractors take
#: ``roi_layer=dict(type='RoIAlign')`` from ``mmcv.ops`` by name)
_NOT_REGISTERED = ('nms', 'roi_layer')


def _typed_dicts(node, path: str, role: Optional[str]) -> Iterator[Tuple[str, str, str]]:
    """(path, type name, role) of every dict under ``node`` with a string ``type``."""
    if isinstance(node, dict):
        if isinstance(node.get('type'), str) and role is not None:
            yield path, node['type'], role
        for key, value in node.items():
            if key == 'type' or key in _NOT_REGISTERED:
                continue
            sub = ROLES.get(key, role)
            if key == 'sampler':   # a dataloader's sampler; a model's (RoI sampler) is a task util
                sub = 'DATA_SAMPLERS' if role in (None, 'DATASETS') else 'TASK_UTILS'
            yield from _typed_dicts(value, f'{path}.{key}' if path else key, sub)
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            yield from _typed_dicts(value, f'{path}[{i}]', role)


def _walk(cfg) -> Iterator[Tuple[str, str, str]]:
    for key, value in cfg.items():
        role = 'LOOPS' if key in _LOOPS else ROLES.get(key)
        if key.endswith('_dataloader') and isinstance(value, dict):
            yield from _typed_dicts(value, key, None)
        elif key == 'default_hooks' and isinstance(value, dict):   # keyed by any name
            for name, hook in value.items():
                yield from _typed_dicts(hook, f'{key}.{name}', 'HOOKS')
        else:
            yield from _typed_dicts(value, key, role)


def _names(registry: Registry) -> List[str]:
    """Names ``registry`` resolves without a scope: its own and its ancestors'."""
    names = []
    while registry is not None:
        names += list(registry.module_dict)
        registry = registry.parent
    return names


def _suggest(name: str, registry: Registry) -> Optional[str]:
    """The name ``registry`` knows that is closest to ``name`` (in ``name``'s scope)."""
    scope, key = Registry.split_scope_key(name)
    candidates = _names(registry)
    if scope is not None and scope != registry.scope:   # e.g. 'mmseg.X' from mmdet's scope
        other = registry._get_root_registry()._search_child(scope)
        candidates = list(other.module_dict) if other is not None else []
    by_lower = {c.lower(): c for c in candidates}   # 'inlineswin' means 'InLineSwin'
    close = difflib.get_close_matches(key.lower(), list(by_lower), n=1)
    return f'{scope}.{by_lower[close[0]]}' if close and scope else \
        (by_lower[close[0]] if close else None)


def unknown_types(cfg, scope: str) -> List[str]:
    """One message per ``type`` of ``cfg`` that no registry of ``scope`` resolves.

    Args:
        cfg (Config | dict): The config, after ``custom_imports`` were imported
            (``Config.fromfile`` does it), so that their types are registered.
        scope (str): The registries' package, the config's ``default_scope``
            (``'mmdet'`` or ``'mmseg'``).

    Returns:
        list[str]: e.g. ``"model.backbone.type='InLineSwinn' is not a registered
        model; did you mean 'InLineSwin'?"``; empty when every type is known.
    """
    registries = importlib.import_module(f'{scope}.registry')
    every = [r for r in vars(registries).values() if isinstance(r, Registry)]
    problems = []
    with DefaultScope.overwrite_default_scope(scope):
        for path, name, role in _walk(cfg):
            registry = getattr(registries, role, None) or getattr(mmengine.registry, role)
            # the expected registry first: the others import their modules only when asked
            if registry.get(name) is not None or any(r.get(name) is not None for r in every):
                continue
            hint = _suggest(name, registry)
            problems.append(
                f'{path}.type={name!r} is not a registered {registry.name}; ' +
                (f'did you mean {hint!r}?' if hint else
                 f'check the spelling, or that custom_imports imports the module that '
                 f'registers it (default_scope={scope!r})'))
    return problems


def check_types(cfg, scope: str, config_path: str) -> None:
    """Exit with one ``error:`` line per unknown type (see :func:`unknown_types`)."""
    problems = unknown_types(cfg, scope)
    if problems:
        raise SystemExit('\n'.join(f'error: {config_path}: {p}' for p in problems))
