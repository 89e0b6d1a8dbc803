"""The table of InLine backbone families: the one list that loading, registration,
``inline_mm.env``, the converter tool, config checks and the tests read. How to add a family
(what its file declares, the entry here, what then covers it): docs/dev/backbones.md,
"Adding a family".
"""
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional, Tuple

import torch

from .base import InLineBackbone
from .checkpoint import CheckpointError, identify_family
from .inline_cswin import InLineCSwin, convert_cswin_checkpoint
from .inline_deit import InLineDeiT, convert_deit_checkpoint
from .inline_pvt import InLinePVT, convert_pvt_checkpoint
from .inline_swin import InLineSwin, convert_swin_checkpoint

__all__ = ['Family', 'FAMILIES', 'Release', 'get_family', 'detect_family', 'convert_official']

StateDict = Dict[str, torch.Tensor]

#: where the InLine authors publish their ImageNet-1K files (links from the README of
#: github.com/LeapLabTHU/InLine); ``?dl=1`` answers with a redirect to the file itself
_TSINGHUA = 'https://cloud.tsinghua.edu.cn/f/{}/?dl=1'


@dataclass(frozen=True)
class Release:
    """One official ImageNet-1K file of a family.

    Args:
        name (str): Short name, e.g. ``'swin_t'``; configs say ``'inline://swin_t'``.
        arch (str): The family preset the file holds (``'tiny'``, ...).
        url (str): The authors' download link.
        sha256 (str, optional): The file's hash where the project knows it. None for every
            official file today: the authors publish no hashes and this project has never
            downloaded them, so none is invented here; :mod:`inline_mm.weights` records the
            hash of each file on its first download and checks it from then on.
    """

    name: str
    arch: str
    url: str
    sha256: Optional[str] = None

    @property
    def file(self) -> str:
        """The file's name in ``checkpoints/`` and in the weights cache."""
        return f'inline_{self.name}.pth'


def _releases(*entries) -> Tuple[Release, ...]:
    return tuple(Release(name, arch, _TSINGHUA.format(key)) for name, arch, key in entries)


@dataclass(frozen=True)
class Family:
    """What the rest of the project needs to know about one backbone family.

    The presets, official-key pattern and minimum input size are read from the class
    (declared in the family's file); the entry adds what is true of the family as a
    whole.

    Args:
        cls (type): The backbone class (registered under its name).
        convert (callable): Official state dict -> the class's keys (pure, idempotent).
        strides (tuple[int]): Output stride of each stage at the default patch size; a
            family with ``out_unit='block'`` has one stride for every block.
        smoke (dict): Arguments of a small model with every kind of block (builds and
            runs in milliseconds): contract tests, config smoke tests.
        out_unit (str): What ``out_indices`` and ``frozen_stages`` count: ``'stage'``
            (a pyramid) or ``'block'`` (a plain ViT). Default: ``'stage'``.
        output_norms (bool): Every output passes its own LayerNorm ``norm{i}``.
            Default: True.
        checkpoints (tuple[Release]): The official ImageNet files of the family (the one
            table of them: :mod:`inline_mm.weights` and ``checkpoints/README.md`` follow it).
    """

    cls: type
    convert: Callable[[StateDict], StateDict]
    strides: Tuple[int, ...]
    smoke: dict
    out_unit: str = 'stage'
    output_norms: bool = True
    checkpoints: Tuple[Release, ...] = field(default_factory=tuple)

    def __post_init__(self):
        if not issubclass(self.cls, InLineBackbone) or 'official_keys' not in vars(self.cls):
            raise TypeError(f'{self.cls!r} is not an InLineBackbone family (it must subclass '
                            'InLineBackbone and declare official_keys)')
        if self.out_unit not in ('stage', 'block'):
            raise ValueError(f"out_unit must be 'stage' or 'block', got {self.out_unit!r}")
        unknown = [r.arch for r in self.checkpoints if r.arch not in self.presets]
        if unknown:
            raise ValueError(f'{self.name}: released files of unknown presets {unknown}')

    @property
    def name(self) -> str:
        return self.cls.__name__

    @property
    def presets(self) -> Dict[str, dict]:
        return self.cls.presets

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


FAMILIES: Dict[str, Family] = {f.name: f for f in (
    Family(InLineSwin, convert_swin_checkpoint, strides=(4, 8, 16, 32),
           smoke=dict(embed_dims=16, depths=(1, 2, 2, 2), num_heads=(1, 2, 4, 8),
                      stage_types=('inline', 'softmax', ('inline', 'softmax'), 'softmax'),
                      drop_path_rate=0.),
           checkpoints=_releases(('swin_t', 'tiny', '32810869fcc34410966b'),
                                 ('swin_s', 'small', 'e9657fd247c04c7cb1a1'),
                                 ('swin_b', 'base', 'bf23564bb64c420aafe1'))),
    Family(InLinePVT, convert_pvt_checkpoint, strides=(4, 8, 16, 32),
           # 32 channels in stage 1, not 16: on CPUs with AMX, oneDNN's bf16 convolutions
           # whose kernel equals the stride (the patch embedding, the spatial reduction)
           # were measured far off (rel. err. 0.1-0.3) for 8-28 input channels.
           smoke=dict(embed_dims=(32, 32, 48, 64), depths=(1, 2, 2, 1), num_heads=(1, 2, 3, 4),
                      mlp_ratios=(2, 2, 2, 2), drop_path_rate=0.,
                      stage_types=(('softmax',), 'inline', ('inline', 'softmax'), 'softmax')),
           checkpoints=_releases(('pvt_t', 'tiny', '90ac52b1555b401eb5e6'),
                                 ('pvt_s', 'small', '1ab953b2479d433080a3'),
                                 ('pvt_m', 'medium', 'a72aec31e6084bc0a280'),
                                 # the official config calls it inline_pvt_b.yaml
                                 ('pvt_l', 'large', 'efd91318ba964f01b288'))),
    Family(InLineCSwin, convert_cswin_checkpoint, strides=(4, 8, 16, 32),
           smoke=dict(embed_dims=16, depths=(1, 2, 2, 1), num_heads=(2, 2, 4, 8),
                      stage_types=('inline', ('inline', 'softmax'), 'softmax', 'softmax'),
                      drop_path_rate=0.),
           checkpoints=_releases(('cswin_t', 'tiny', '49fa2ecc543647c4b970'),
                                 ('cswin_s', 'small', '59f4e65f776f4052b93c'),
                                 ('cswin_b', 'base', '91e17121df284ae38521'))),
    Family(InLineDeiT, convert_deit_checkpoint, strides=(16,),
           smoke=dict(embed_dims=32, depth=12, num_heads=2, mlp_ratio=1., pretrain_img_size=64,
                      drop_path_rate=0.),
           out_unit='block', output_norms=False,
           checkpoints=_releases(('deit_t', 'tiny', '1d6b8191ad6d4114b291'),
                                 ('deit_s', 'small', '2f3898b07e9247f3beb3'),
                                 ('deit_b', 'base', '10bdd726d4b0435eb34e'))),
)}


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
