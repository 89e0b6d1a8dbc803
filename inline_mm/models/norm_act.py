"""Norm and activation layers from mmdet-style config dicts (``norm_cfg``, ``act_cfg``).

The backbones take ``norm_cfg=dict(type='LN', eps=...)`` and ``act_cfg=dict(type='GELU')``
as mmdet's do, without mmcv: the types here carry mmcv's names (so mmcv, mmdet and
``inline_mm.apis.config`` know them too) and build plain ``torch.nn`` modules. Only what
a token backbone can use: a norm over the channels of ``(B, N, C)`` tokens, and
element-wise activations.
"""
import inspect
from functools import partial
from typing import Callable, Optional

import torch.nn as nn

__all__ = ['NORM_LAYERS', 'ACT_LAYERS', 'norm_layer', 'act_layer']

#: ``norm_cfg`` types (mmcv's names) -> module
NORM_LAYERS = {'LN': nn.LayerNorm}
#: ``act_cfg`` types (mmcv's names) -> module; mmcv's ``Swish`` and ``HSwish`` are
#: torch's ``SiLU`` and ``Hardswish``
ACT_LAYERS = {'GELU': nn.GELU, 'ReLU': nn.ReLU, 'ReLU6': nn.ReLU6, 'LeakyReLU': nn.LeakyReLU,
              'ELU': nn.ELU, 'SiLU': nn.SiLU, 'Swish': nn.SiLU, 'HSwish': nn.Hardswish,
              'Sigmoid': nn.Sigmoid, 'Tanh': nn.Tanh}


def _split(cfg, table: dict, what: str, example: str):
    if not isinstance(cfg, dict) or not isinstance(cfg.get('type'), str):
        raise ValueError(f'{what} must be a dict with a type, e.g. {example}; got {cfg!r}')
    options = {k: v for k, v in cfg.items() if k != 'type'}
    cls = table.get(cfg['type'])
    if cls is None:
        raise ValueError(f"{what} type {cfg['type']!r} is not supported by the InLine "
                         f"backbones: choose one of {', '.join(table)} (e.g. {example})")
    return cls, options


def _check_options(cls, options: dict, what: str, skip: int):
    known = list(inspect.signature(cls).parameters)[skip:]
    unknown = [k for k in options if k not in known]
    if unknown:
        raise ValueError(f'{what}: {cls.__name__} takes no {", ".join(unknown)}; its options '
                         f'are {", ".join(known)}')


def norm_layer(norm_cfg: Optional[dict], eps: float,
               what: str = 'norm_cfg') -> Callable[[int], nn.Module]:
    """``norm_cfg`` -> ``f(channels)`` that builds the norm.

    None: ``nn.LayerNorm`` with ``eps`` (what the released model has at that place); a
    dict without ``eps`` keeps ``eps`` too, so ``dict(type='LN')`` is the released model
    everywhere. ``requires_grad=False`` (mmcv's key) freezes the norm's parameters.
    """
    if norm_cfg is None:
        return partial(nn.LayerNorm, eps=eps)
    cls, options = _split(norm_cfg, NORM_LAYERS, what, "dict(type='LN', eps=1e-6)")
    requires_grad = options.pop('requires_grad', True)
    options.setdefault('eps', eps)
    _check_options(cls, options, what, skip=1)

    def build(channels: int) -> nn.Module:
        layer = cls(channels, **options)
        for p in layer.parameters():
            p.requires_grad = requires_grad
        return layer
    return build


def act_layer(act_cfg: Optional[dict], what: str = 'act_cfg') -> Callable[[], nn.Module]:
    """``act_cfg`` -> ``f()`` that builds the activation (None: ``nn.GELU``, the released
    models'); options are the module's, e.g. ``dict(type='GELU', approximate='tanh')``."""
    if act_cfg is None:
        return nn.GELU
    cls, options = _split(act_cfg, ACT_LAYERS, what, "dict(type='GELU')")
    _check_options(cls, options, what, skip=0)
    return partial(cls, **options) if options else cls
