"""The table of InLine backbone families: the one list that loading, registration,
``inline_mm.env``, the converter tool, config checks and the tests read.

How to add a family (InLine-DeiT is the example the table was shaped for):

1. Write ``inline_mm/models/inline_<family>.py`` with the backbone class, a subclass
   of :class:`~.base.InLineBackbone`, and next to it everything particular to the
   family: ``ARCH_SETTINGS`` (the released presets, at least ``depths``),
   ``OFFICIAL_KEYS`` (regexes that each match some key of its official *and* its
   converted state dicts, and together match no other family's) and
   ``convert_<family>_checkpoint(state)`` (official state dict -> the backbone's
   keys; pure, idempotent). The class declares ``presets = ARCH_SETTINGS``,
   ``official_keys = OFFICIAL_KEYS``, ``block_key`` (a regex with groups ``block``
   and, for pyramids, ``stage``) and ``min_input_size``; its ``__init__`` takes its own
   arguments and ``**kwargs`` (the ones every family takes, documented on the base), calls
   ``super().__init__(dims, depths, arch_name, **kwargs)`` (``dims``: channels per stage, or
   per block for a plain ViT; ``self.resolve_arch`` gives ``arch_name``), builds its blocks
   from what the base keeps (``self.drop_path_rate``, ``self.norm_cfg``,
   ``self.parse_inline_cfg(...)``, ...) and ends with ``self._finish_init()``; it implements
   ``_convert_official``, ``_stem_modules`` (modules or parameters, e.g. a class token),
   ``_stage_list`` if its stages are not ``self.stages``, and ``forward(x,
   valid_sizes=None)``. Blocks take their attention from a table ``ATTENTION_TYPES`` (the call
   contract is
   the docstring of ``attention.py``) and run through ``layers.BlockStage`` /
   ``layers.run_block`` for ``with_cp``. Padding awareness (``padding.py``):
   ``forward`` starts with ``self.prepare_input`` (which reads each image's region),
   derives each map's regions with ``ValidMap.scaled``, zeroes tokens outside them
   before anything reads across tokens (merges, overlapping convolutions) and returns
   outputs through ``self.output``; a layout decision taken from a map size is taken
   per image with fixed-shape tensor forms of the sizes (``ValidMap.size_tensor``,
   ``ValidMap.memo``). ``NO_PADDING`` is the map without padding:
   its methods are the plain operations, so family code has no ``if`` on padding. Import only from
   ``inline_mm/models`` and third-party packages.
2. Add one :class:`Family` entry to :data:`FAMILIES` below; its ``smoke`` arguments
   must include ``embed_dims`` and ``depths`` (or ``depth``), as the contract tests
   derive wider and deeper variants from them.  Its released files go in
   ``checkpoints`` (one :class:`Release` each; list them in ``checkpoints/README.md``).

That is all: the backbone is then registered in mmdet's and mmseg's ``MODELS``
(whichever is installed), its official checkpoints are recognised by
``tools/model_converters/convert_checkpoint.py`` and its released files get short names
(``inline://<name>``, :mod:`inline_mm.weights`), and ``tests/test_backbone_contract.py`` runs every
contract test (shapes at normal, odd and non-square sizes, minimum input, frozen
stages, ``with_cp``, invalid arguments, checkpoint layouts, wrong-variant refusal,
registration) on the entry's ``smoke`` configuration; ``tests/test_padding.py`` checks
that an image gets the same features alone, in a larger padded batch and unpadded;
``tests/test_export.py`` traces
and exports it to ONNX (so write size arithmetic with ``layers.round_up`` /
``layers.pad_amount``, not ``-(-h // w)`` / ``-h % p``, which ONNX's truncating integer
division exports wrongly, and no per-sample Python loops, which a tracer bakes into the
graph); and ``inline_mm.timm`` registers every preset as ``inline_<family>_<preset>``
(``tests/test_timm.py``). Goldens against the official code are cases in
``tests/data/golden/cases.json`` (``tests/test_goldens.py`` runs every case); what is particular
to one family (parameter counts, quirks) goes in ``tests/test_inline_<family>.py``.
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
