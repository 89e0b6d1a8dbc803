"""The InLine backbone families and their variants: the one table that loading, registration,
the weights' short names, :mod:`inline_mm.timm`, ``inline_mm.env``, the converter tool,
config checks and the tests read.

Each family's file ends by declaring the family and each of its variants once, with
:func:`register_family` and :class:`Variant` (as a timm model file declares each variant's
``model_args`` and pretrained cfg beside its ``@register_model``). Everything else is derived
from that: the backbone in mmdet's and mmseg's ``MODELS`` (whichever is installed), its entry
in :data:`FAMILIES`, each variant's preset (the backbone's ``arch``), the short name of its
official file (``inline://swin_t``) and, through :func:`on_variant`, its timm model
(``inline_swin_tiny``). How to add a family or a variant: docs/dev/backbones.md,
"Adding a family".
"""
import re
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Tuple

import torch

from .checkpoint import CheckpointError, identify_family
from .registry import register_backbones

__all__ = ['Family', 'Variant', 'FAMILIES', 'register_family', 'register_variant', 'on_variant',
           'get_family', 'detect_family', 'convert_official', 'model_name', 'official_url']

StateDict = Dict[str, torch.Tensor]


def official_url(key: str) -> str:
    """Where the InLine authors publish a file (links from the README of
    github.com/LeapLabTHU/InLine); ``?dl=1`` answers with a redirect to the file itself."""
    return f'https://cloud.tsinghua.edu.cn/f/{key}/?dl=1'


def model_name(family: str, arch: str) -> str:
    """timm name of a family's variant: ``('InLineSwin', 'tiny')`` -> ``'inline_swin_tiny'``."""
    return f"inline_{re.sub(r'^InLine', '', family).lower()}_{arch}"


@dataclass(frozen=True)
class Variant:
    """One variant of a family: its preset and, where released, its official file.

    Args:
        arch (str): The preset's name, the backbone's ``arch`` (``'tiny'``, ...).
        model_args (dict): The preset: the backbone's arguments (``depths`` at least).
        weights (str, optional): Short name of the official ImageNet-1K file, e.g.
            ``'swin_t'``: configs say ``'inline://swin_t'``. None: not released.
        url (str): The authors' download link of that file.
        sha256 (str, optional): The file's hash where the project knows it. None for every
            official file today: the authors publish no hashes and this project has never
            downloaded them, so none is invented here; :mod:`.weights` records the hash of
            each file on its first download and checks it from then on.
    """

    arch: str
    model_args: dict
    weights: Optional[str] = None
    url: str = ''
    sha256: Optional[str] = None

    @property
    def file(self) -> str:
        """The official file's name in ``checkpoints/`` and in the weights cache."""
        return f'inline_{self.weights}.pth'


@dataclass(frozen=True)
class Family:
    """What the rest of the project needs to know about one backbone family (made by
    :func:`register_family`; the presets, official-key pattern and minimum input size are
    read from the class).

    Args:
        cls (type): The backbone class (registered under its name).
        convert (callable): Official state dict -> the class's keys (pure, idempotent).
        strides (tuple[int]): Output stride of each stage at the default patch size; a
            family with ``out_unit='block'`` has one stride for every block.
        smoke (dict): Arguments of a small model with every kind of block (builds and
            runs in milliseconds; ``embed_dims`` and ``depths`` or ``depth``, which the
            contract tests widen and deepen): contract tests, config smoke tests.
        first_conv (str): The stem convolution (timm's ``first_conv``, what ``in_chans``
            adapts).
        out_unit (str): What ``out_indices`` and ``frozen_stages`` count: ``'stage'``
            (a pyramid) or ``'block'`` (a plain ViT). Default: ``'stage'``.
        output_norms (bool): Every output passes its own LayerNorm ``norm{i}``.
            Default: True.
        variants (dict[str, Variant]): arch -> variant, filled by :func:`register_variant`.
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
#: called with ``(family, variant)`` for each variant, declared before or after (:func:`on_variant`)
_WATCHERS: List[Callable[[Family, Variant], None]] = []


def register_family(cls: type, variants: Iterable[Variant] = (), **facts) -> Family:
    """Declare backbone family ``cls`` and its ``variants``: register the class in mmdet's and
    mmseg's ``MODELS``, add it to :data:`FAMILIES` and each variant with
    :func:`register_variant`. ``facts``: the other arguments of :class:`Family`."""
    family = Family(cls, **facts)
    if family.name in FAMILIES:
        raise ValueError(f'{family.name} is already a declared family')
    cls.presets = {}
    FAMILIES[family.name] = family
    register_backbones([cls])
    for variant in variants:
        register_variant(cls, variant)
    return family


def register_variant(cls: type, variant: Variant) -> Variant:
    """Declare ``variant`` of family ``cls``: a preset of the class (``arch``), its file's
    short name, and whatever :func:`on_variant` watches (``inline_mm.timm``'s names)."""
    family = get_family(cls.__name__)
    taken = {v.weights for f in FAMILIES.values() for v in f.checkpoints}
    if variant.arch in family.variants or (variant.weights and variant.weights in taken):
        raise ValueError(f'{family.name}: variant {variant.arch!r} or file {variant.weights!r} '
                         'is already declared')
    if 'depths' not in variant.model_args:
        raise ValueError(f'{family.name} {variant.arch}: model_args need depths')
    family.variants[variant.arch] = variant
    cls.presets[variant.arch] = variant.model_args
    for watcher in _WATCHERS:
        watcher(family, variant)
    return variant


def on_variant(watcher: Callable[[Family, Variant], None]):
    """Call ``watcher(family, variant)`` for every variant declared so far and every one
    declared later (how :mod:`inline_mm.timm` keeps its names)."""
    _WATCHERS.append(watcher)
    for family in list(FAMILIES.values()):
        for variant in list(family.variants.values()):
            watcher(family, variant)


def get_family(name: str) -> Family:
    """The entry of backbone ``name`` (e.g. a config's ``backbone.type``)."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise KeyError(f'{name!r} is not an InLine backbone; known: {", ".join(FAMILIES)}') \
            from None


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
