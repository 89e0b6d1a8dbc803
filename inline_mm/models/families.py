"""The InLine backbone families and their variants, the one table everything reads: each
family's file ends by declaring itself and each variant once (:func:`register_family`), as timm
declares ``model_args`` beside ``@register_model``. Adding either: docs/dev/backbones.md.
"""
import re
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Tuple

import torch

from .checkpoint import CheckpointError, identify_family
from .registry import register_backbone

__all__ = ['Family', 'Variant', 'FAMILIES', 'register_family', 'register_variant', 'on_variant',
           'get_family', 'detect_family', 'convert_official', 'model_name', 'official_url']

StateDict = Dict[str, torch.Tensor]


def official_url(key: str) -> str:
    """An InLine authors' file (github.com/LeapLabTHU/InLine); ``?dl=1`` redirects to it."""
    return f'https://cloud.tsinghua.edu.cn/f/{key}/?dl=1'


def model_name(family: str, arch: str) -> str:
    """timm name of a family's variant: ``('InLineSwin', 'tiny')`` -> ``'inline_swin_tiny'``."""
    return f"inline_{re.sub(r'^InLine', '', family).lower()}_{arch}"


@dataclass(frozen=True)
class Variant:
    """A family's variant: ``arch`` (its name), ``model_args`` (the preset, ``depths`` at least)
    and its official ImageNet-1K file: ``weights`` (short name, ``'inline://swin_t'``), ``url``,
    ``sha256`` (None for every official file: the authors publish none, so none is invented;
    :mod:`.weights` records each file's hash on its first download)."""

    arch: str
    model_args: dict
    weights: Optional[str] = None
    url: str = ''
    sha256: Optional[str] = None


@dataclass(frozen=True)
class Family:
    """A family, as :func:`register_family` declares it (presets, keys, minimum size: ``cls``'s).
    Args: ``cls`` (the backbone class), ``convert`` (official state dict -> its keys; pure,
    idempotent), ``strides`` (of each stage, or of every block), ``smoke`` (a small model with
    every kind of block, built with the default ``arch``: ``embed_dims`` and ``depths`` or
    ``depth``, which the contract tests widen and deepen), ``first_conv`` (the stem
    convolution: timm's ``first_conv``), ``out_unit`` (what ``out_indices`` count: ``'stage'``
    of a pyramid or ``'block'`` of a plain ViT), ``output_norms`` (a LayerNorm ``norm{i}`` on
    every output), ``variants`` (arch -> :class:`Variant`).
    """

    cls: type
    convert: Callable[[StateDict], StateDict]
    strides: Tuple[int, ...]
    smoke: dict
    first_conv: str
    out_unit: str = 'stage'
    output_norms: bool = True
    variants: Dict[str, Variant] = field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.cls, type) or 'official_keys' not in vars(self.cls):
            raise TypeError(f'{self.cls!r} is not an InLineBackbone family (it must subclass '
                            'InLineBackbone and declare official_keys)')
        if self.out_unit not in ('stage', 'block'):
            raise ValueError(f"out_unit must be 'stage' or 'block', got {self.out_unit!r}")

    @property
    def name(self) -> str:
        return self.cls.__name__

    @property
    def presets(self) -> Dict[str, dict]:
        return self.cls.presets

    @property
    def checkpoints(self) -> Tuple[Variant, ...]:
        """The variants with an official file."""
        return tuple(v for v in self.variants.values() if v.weights)

    @property
    def official_keys(self) -> Tuple[str, ...]:
        return self.cls.official_keys

    @property
    def min_input_size(self) -> int:
        """Smallest image side the presets accept (the total stride)."""
        return self.cls.min_input_size

    def stride(self, i: int) -> int:
        """Output stride of stage (or block) ``i``."""
        return self.strides[i] if self.out_unit == 'stage' else self.strides[0]


#: backbone name -> family, in the order the families were declared
FAMILIES: Dict[str, Family] = {}
_WATCHERS: List[Callable[[Family, Variant], None]] = []


def register_family(cls: type, variants: Iterable[Variant] = (), **facts) -> Family:
    """Declare family ``cls`` (``facts``: :class:`Family`'s arguments) and its ``variants``."""
    family = Family(cls, **facts)
    if family.name in FAMILIES:
        raise ValueError(f'{family.name} is already a declared family')
    cls.presets = {}
    FAMILIES[family.name] = family
    register_backbone(cls)
    for variant in variants:
        register_variant(cls, variant)
    return family


def register_variant(cls: type, variant: Variant) -> Variant:
    """Declare ``variant`` of family ``cls`` (to the table and each :func:`on_variant`)."""
    family = get_family(cls.__name__)
    taken = {v.weights for f in FAMILIES.values() for v in f.checkpoints}
    if variant.arch in family.variants or (variant.weights and variant.weights in taken):
        raise ValueError(f'{family.name}: variant {variant.arch!r} or file {variant.weights!r} '
                         'is already declared')
    family.variants[variant.arch] = variant
    cls.presets[variant.arch] = variant.model_args
    for watcher in _WATCHERS:
        watcher(family, variant)
    return variant


def on_variant(watcher: Callable[[Family, Variant], None]):
    """Call ``watcher(family, variant)`` for every variant, declared so far or later."""
    _WATCHERS.append(watcher)
    for family, variant in [(f, v) for f in FAMILIES.values() for v in f.variants.values()]:
        watcher(family, variant)


def get_family(name: str) -> Family:
    """The entry of backbone ``name`` (e.g. a config's ``backbone.type``)."""
    if name not in FAMILIES:
        raise KeyError(f'{name!r} is not an InLine backbone; known: {", ".join(FAMILIES)}')
    return FAMILIES[name]


def detect_family(state: StateDict) -> str:
    """Which family a state dict (official or converted) belongs to."""
    name = identify_family(state, [(f.name, f.official_keys) for f in FAMILIES.values()])
    if name is None:
        raise CheckpointError(f'not a checkpoint of any InLine backbone ({", ".join(FAMILIES)}); '
                              f'first keys: {list(state)[:5]}')
    return name


def convert_official(state: StateDict) -> Tuple[str, StateDict]:
    """Detect the family of an official (or converted) state dict and convert it;
    returns ``(family name, converted state dict)``."""
    name = detect_family(state)
    return name, FAMILIES[name].convert(state)
