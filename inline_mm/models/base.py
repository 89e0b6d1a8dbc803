"""The contract every InLine backbone keeps, and the code it shares.

A family subclasses :class:`InLineBackbone` and declares, as class attributes, its
``official_keys`` (regexes that identify its state dicts, official or converted) and
``block_key`` (where block indices sit in its keys), and its variants (``presets``) with
:func:`.families.register_family`; it implements ``_convert_official`` (its converter),
``_stem_modules``, ``_stage_modules`` if a stage owns more than ``self.stages[i]``, and
``forward``.
The base class gives it: presets with overrides, argument checks, output norms,
``frozen_stages`` re-applied by ``train()``, ``with_cp`` on every stage, input
checks, and ``init_cfg`` loading through :mod:`.checkpoint` with the checks against
other families and variants.

What a "stage" is follows the family: a resolution stage of a pyramid (InLine-Swin,
-PVT, -CSwin), or one block of a plain ViT (``out_indices`` and ``frozen_stages``
then count blocks).
"""
import contextlib
import inspect
import re
from typing import Dict, List, Optional, Sequence, Set, Tuple, Union

import torch
import torch.nn as nn
from timm.layers import trunc_normal_

from .attention import INLINE, INLINE_OPTIONS, SOFTMAX, InLineAttention, check_inline_options
from .checkpoint import check_layout, identify_family, load_pretrained
from .families import FAMILIES
from .impl import check_impl, choose_path, is_exporting
from .init_cfg_module import InitCfgModule
from .layers import to_nchw
from .norm_act import norm_layer
from .padding import NO_PADDING, ValidMap, build_valid_map, zero_padding
from .tracing import is_fx_proxy, refuse_script, size_guard

__all__ = ['InLineBackbone', 'parse_stage_types', 'parse_inline_cfg', 'check_out_indices',
           'resolve_arch', 'using_impl']

#: what :meth:`InLineBackbone.no_weight_decay` counts as a normalisation layer
_NORM_LAYERS = (nn.LayerNorm, nn.GroupNorm, nn.modules.batchnorm._BatchNorm,
                nn.modules.instancenorm._InstanceNorm, nn.RMSNorm)

_TYPE_ALIASES = {'inline': INLINE, 'i': INLINE, 'softmax': SOFTMAX, 's': SOFTMAX}


def parse_stage_types(stage_types: Sequence, depths: Sequence[int]) -> List[List[str]]:
    """Expand per-stage attention types into one ``'inline'``/``'softmax'`` per block.

    Each entry of ``stage_types`` is either one type for the whole stage
    (``'inline'`` or ``'softmax'``, short forms ``'I'``/``'S'`` accepted) or a
    sequence with one type per block of that stage (a mixed stage, e.g. InLine-Swin-B
    stage 3: ``('inline',) * 2 + ('softmax',) * 16``).
    """
    if len(stage_types) != len(depths):
        raise ValueError(f'stage_types has {len(stage_types)} entries but there are '
                         f'{len(depths)} stages (depths={tuple(depths)})')
    expanded = []
    for i, (entry, depth) in enumerate(zip(stage_types, depths)):
        per_block = [entry] * depth if isinstance(entry, str) else list(entry)
        if len(per_block) != depth:
            raise ValueError(f'stage_types[{i}] lists {len(per_block)} block types but stage {i} '
                             f'has depth {depth}')
        try:
            expanded.append([_TYPE_ALIASES[str(t).lower()] for t in per_block])
        except KeyError as e:
            raise ValueError(f'stage_types[{i}]: unknown attention type {e.args[0]!r}; use '
                             f"'inline' or 'softmax'") from None
    return expanded


def parse_inline_cfg(inline_cfg, block_types: Sequence[Sequence[str]], name: str,
                     window: bool = False) -> List[Dict]:
    """A backbone's ``inline_cfg`` -> the switches of each stage's InLine blocks: one dict
    per stage with the keys that differ from :data:`.attention.INLINE_OPTIONS` (the
    ``InLineAttention`` arguments; ``{}`` for the released model).

    Args:
        inline_cfg (dict | Sequence | None): None or ``{}``: the released model; a dict:
            the same switches for every InLine block; a sequence: one entry (dict or
            None) per stage, where a stage without InLine blocks takes only None/``{}``.
        block_types (Sequence[Sequence[str]]): Each stage's block types
            (:func:`parse_stage_types`).
        name (str): The backbone (for messages).
        window (bool): Whether ``window_size`` may be set (InLine-Swin).
    """
    n = len(block_types)
    has_inline = [INLINE in types for types in block_types]
    if inline_cfg is None or (isinstance(inline_cfg, dict) and not inline_cfg):
        return [{} for _ in range(n)]
    if isinstance(inline_cfg, dict):
        entries = [inline_cfg] * n
        options = check_inline_options(inline_cfg, f'{name} inline_cfg', window)
        if options != INLINE_OPTIONS and not any(has_inline):
            raise ValueError(f'{name} inline_cfg={dict(inline_cfg)!r} sets InLine switches, but '
                             'no stage has an InLine block (stage_types)')
    elif isinstance(inline_cfg, (list, tuple)):
        entries = list(inline_cfg)
        if len(entries) != n:
            raise ValueError(f'{name} inline_cfg has {len(entries)} entries but there are {n} '
                             'stages: give one entry (dict or None) per stage, or one dict for '
                             'every InLine block')
    else:
        raise ValueError(f'{name} inline_cfg must be a dict, a sequence with one dict or None '
                         f'per stage, or None; got {type(inline_cfg).__name__} {inline_cfg!r}')
    out = []
    for i, entry in enumerate(entries):
        where = f'{name} inline_cfg' if isinstance(inline_cfg, dict) else \
            f'{name} inline_cfg[{i}]'
        options = check_inline_options(entry, where, window)
        changed = {k: v for k, v in options.items() if v != INLINE_OPTIONS[k]}
        if changed and not has_inline[i] and not isinstance(inline_cfg, dict):
            raise ValueError(f'{where} = {dict(entry)!r}, but stage {i} has no InLine block '
                             f'(its blocks: {", ".join(block_types[i])}); give None or {{}} '
                             'for it')
        out.append(changed if has_inline[i] else {})
    return out


def resolve_arch(name: str, presets: dict, arch: str, **overrides) -> dict:
    """The preset ``arch`` of backbone ``name`` with every non-None override applied
    (sequences become tuples); ``arch_name`` is ``arch``, or ``'custom'`` when an
    override changed the preset."""
    if arch not in presets:
        raise ValueError(f'unknown {name} arch {arch!r}; choose one of {sorted(presets)} or '
                         f'override {"/".join(overrides)}')
    out, custom = {}, False
    for key, value in overrides.items():
        preset = presets[arch][key]
        if value is None:
            value = preset
        elif key != 'stage_types':
            value = tuple(value) if isinstance(value, (list, tuple)) else value
            custom |= value != preset
        out[key] = value
    out['arch_name'] = 'custom' if custom else arch
    return out


def check_out_indices(out_indices: Sequence[int], num_stages: int) -> Tuple[int, ...]:
    out_indices = tuple(out_indices)
    if not out_indices or any(not 0 <= i < num_stages for i in out_indices):
        raise ValueError(f'out_indices {out_indices} must be non-empty and within '
                         f'0..{num_stages - 1}')
    return out_indices


def check_with_cp(value, num_stages: int) -> Union[bool, Tuple[int, ...]]:
    """``with_cp`` as the backbones keep it: a bool, or a sorted tuple of stage indices."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (list, tuple)) and all(
            isinstance(i, int) and not isinstance(i, bool) for i in value):
        bad = [i for i in value if not 0 <= i < num_stages]
        if not bad:
            return tuple(sorted(set(value)))
    raise ValueError(f'with_cp must be True, False or a list of stage indices in '
                     f'0..{num_stages - 1} (the stages whose blocks are checkpointed), '
                     f'got {value!r}')


def check_heads(dims: Sequence[int], num_heads: Sequence[int]):
    """Every stage's channels divide into its heads."""
    for i, (d, h) in enumerate(zip(dims, num_heads)):
        if d % h:
            raise ValueError(f'stage {i}: {d} channels are not divisible by {h} heads')


def check_input(x: torch.Tensor, name: str, in_channels: Optional[int],
                min_size: int) -> torch.Tensor:
    """``x`` if it is a ``(B, in_channels, H, W)`` batch with sides of at least
    ``min_size`` (``InLineBackbone.check_input``); raises ``ValueError`` otherwise."""
    if x.dim() != 4:
        raise ValueError(f'{name} expects a (B, C, H, W) batch, got shape '
                         f'{tuple(x.shape)}')
    if in_channels is not None and x.shape[1] != in_channels:
        raise ValueError(f'{name} was built for {in_channels}-channel '
                         f'input but got {x.shape[1]} channels: convert grayscale/RGBA images '
                         "to RGB (LoadImageFromFile(color_type='color') does) or set "
                         'in_channels')
    h, w = x.shape[-2:]
    if min(h, w) < min_size:
        raise ValueError(f'{name} got a {h}x{w} input (the batch as the data '
                         'pipeline and batching left it), smaller than its total stride '
                         f'({min_size}); resize or pad images to at least '
                         f'{min_size} px per side (a Resize or Pad step). In an '
                         "mmdet/mmseg pipeline, dict(type='CheckImageSize') after the "
                         'resize names the image file that is too small')
    return x


def padding_unaware(x: torch.Tensor, valid_sizes) -> torch.Tensor:
    """``x``, when ``valid_sizes`` is None: the check an FX graph (padding-unaware, as
    exported graphs) makes of its ``valid_sizes`` input when it runs."""
    if valid_sizes is not None:
        raise ValueError('valid_sizes cannot be given to an FX graph of an InLine backbone: '
                         'it is padding-unaware (pad_aware=False semantics)')
    return x


@contextlib.contextmanager
def using_impl(model: nn.Module, impl: str):
    """Every InLine backbone and attention in ``model`` set to ``impl`` for the block, and
    back after it: for tools that count or read what the formula computes (MACs count the
    plain form; the kernel folds the projection into other products)."""
    owners = [m for m in model.modules() if isinstance(m, (InLineBackbone, InLineAttention))]
    before = [m.impl for m in owners]
    try:
        for m in owners:
            m.impl = impl
        yield model
    finally:
        for m, value in zip(owners, before):
            m.impl = value


# Under FX the sizes are not known while tracing: the checks are nodes run with the graph.
torch.fx.wrap('check_input')
torch.fx.wrap('padding_unaware')


class InLineBackbone(InitCfgModule):
    """Base of the InLine backbones: the arguments every family takes, presets, output
    norms, frozen stages, ``with_cp``, ``impl``, input checks and pretrained loading.

    A family's ``__init__`` takes its own arguments (its preset's and layout's) and
    ``**kwargs``, resolves its preset (:meth:`resolve_arch`), calls this ``__init__``
    with ``dims``, ``depths``, the arch name and ``**kwargs``, builds ``self.stages`` (or
    overrides :meth:`_stage_list`) from the attributes set here, each stage with a
    ``with_cp`` attribute, and ends with :meth:`_finish_init`; it defines the class
    attributes and methods listed in the module docstring.

    Args (what every family takes, keyword only):
        in_channels (int): Input channels. Default: 3.
        qkv_bias (bool): Bias of the qkv projections. Default: True.
        drop_rate (float): Dropout after projections (and position embeddings) and in
            the MLPs. Default: 0.
        attn_drop_rate (float): Attention dropout. Default: 0.
        drop_path_rate (float, optional): Stochastic depth, rising linearly over the
            blocks to this. Default: the family's (:attr:`default_drop_path_rate`).
        out_indices (Sequence[int], optional): Stages (InLine-DeiT: blocks) whose
            outputs are returned, each through its own output norm ``norm{i}`` where the
            family has them. Default: the family's (:attr:`default_out_indices`; None:
            every stage).
        frozen_stages (int): Freeze the stem (0) and stages ``< i`` (with their output
            norms); -1 freezes nothing. Default: -1.
        with_cp (bool | Sequence[int]): Gradient checkpointing per block (non-reentrant)
            while training: True for every stage, or the stages' indices. Default: False.
        pad_aware (bool): Treat the zero padding of a batch as absent: every image gets
            the features it gets alone (see :meth:`valid_map`); False computes over the
            whole padded map. Default: True.
        impl (str, optional): How InLine attention runs (docs/padding.md, "Two paths"):
            ``'plain'``, plain tensor ops batched over the images (no loop over them, no
            host read: the GPU path); ``'kernel'``, the per-sample kernel (faster on a
            CPU); ``'auto'``, the kernel on the CPU and the plain form elsewhere, decided
            from the input's device at each forward. ``torch.compile``, export and
            tracing run the plain form. None: ``$INLINE_MM_IMPL``, else ``'auto'``.
            Default: None.
        batched (bool, optional): The older name of ``impl``: True is ``'plain'``,
            False ``'kernel'``. Default: None.
        inline_cfg (dict | Sequence, optional): The paper's switches of the InLine blocks
            (``attention``, ``kernel``, ``local_residual``; InLine-Swin also
            ``window_size``; see ``InLineAttention`` and docs/backbones.md): one dict for
            every InLine block, or one entry (dict or None) per stage. None: the released
            model. Default: None.
        norm_cfg (dict, optional): Every LayerNorm, as mmdet's ``norm_cfg``:
            ``dict(type='LN', eps=...)`` (without ``eps``, the released model's).
            Default: None (the released model).
        act_cfg (dict, optional): The MLPs' activation, e.g. ``dict(type='GELU')``
            (``inline_mm.models.norm_act.ACT_LAYERS``; InLine's local-kernel predictor
            keeps its GELU). Default: None (GELU).
        init_cfg (dict, optional): ``dict(type='Pretrained', checkpoint=PATH)`` loads
            an official ImageNet file, a state dict, an OpenMMLab checkpoint or a
            converted ``.safetensors``; extra keys: ``allow_pickle`` (bool, trust the
            file), ``checkpoint_key`` (e.g. ``'state_dict_ema'`` for the official EMA
            weights), ``min_match`` (fraction of tensors that must be found, default
            0.9). Other ``init_cfg`` go to mmengine. Default: None.

    Returns (forward ``(x, valid_sizes=None)``; ``valid_sizes``, one ``(h, w)`` per image,
    overrides reading the padding from ``x``):
        tuple[Tensor]: ``(B, C_i, H_i, W_i)`` for each ``i`` in ``out_indices``, zero
        outside each image's region.
    """

    #: arch name -> settings (``depths`` at least), from the family's variants.
    presets: Dict[str, dict] = {}
    #: regexes that all match some key of this family's state dicts (official or
    #: converted) and no other family's; set by every family.
    official_keys: Tuple[str, ...] = ()
    #: regex of a block's state-dict keys, groups ``stage`` (optional) and ``block``.
    block_key = r'stages\.(?P<stage>\d+)\.blocks\.(?P<block>\d+)\.'
    #: whether the official model's final ``norm`` initialises the last output norm
    #: (InLine-Swin, InLine-CSwin); InLine-PVT has none, so all its output norms start fresh.
    official_final_norm = True
    #: total stride of the last stage; smaller inputs are refused (see ``check_input``).
    min_input_size = 32
    #: how much each stage after the first divides the map (1: a plain ViT's blocks).
    stage_downsample = 2
    #: parts of parameter names that take no weight decay (the configs'
    #: ``paramwise_cfg.custom_keys``): ``'norm'`` for the LayerNorms, and the family's
    #: position tables. :meth:`no_weight_decay` lists the parameters they select.
    no_weight_decay_keys: Tuple[str, ...] = ('norm',)

    #: ``drop_path_rate`` when none is given
    default_drop_path_rate = 0.2
    #: ``out_indices`` when none are given (None: every stage)
    default_out_indices: Optional[Tuple[int, ...]] = None

    def __init__(self, dims: Sequence[int], depths: Sequence[int], arch_name: str, *,
                 in_channels: int = 3, qkv_bias: bool = True, drop_rate: float = 0.,
                 attn_drop_rate: float = 0., drop_path_rate: Optional[float] = None,
                 out_indices: Optional[Sequence[int]] = None, frozen_stages: int = -1,
                 with_cp: Union[bool, Sequence[int]] = False, pad_aware: bool = True,
                 impl: Optional[str] = None, batched: Optional[bool] = None,
                 inline_cfg: Optional[Union[dict, Sequence[Optional[dict]]]] = None,
                 norm_cfg: Optional[dict] = None, act_cfg: Optional[dict] = None,
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        num_stages = len(dims)
        if out_indices is None:
            out_indices = self.default_out_indices or range(num_stages)
        self.out_indices = check_out_indices(out_indices, num_stages)
        if not -1 <= frozen_stages <= num_stages:
            raise ValueError(f'frozen_stages must be in -1..{num_stages}, got {frozen_stages}')
        self.frozen_stages = frozen_stages
        self.num_stages = num_stages
        self.dims = list(dims)
        self.depths = depths
        self.arch_name = arch_name
        self.in_channels = in_channels
        self.qkv_bias, self.drop_rate, self.attn_drop_rate = qkv_bias, drop_rate, attn_drop_rate
        self.drop_path_rate = self.default_drop_path_rate if drop_path_rate is None \
            else drop_path_rate
        self.pad_aware = bool(pad_aware)
        self._impl = check_impl(impl, batched)
        self._with_cp_arg = with_cp
        self.inline_cfg, self.norm_cfg, self.act_cfg = inline_cfg, norm_cfg, act_cfg

    def __init_subclass__(cls, **kwargs):
        """A subclass ``__init__``'s ``**kwargs`` shown in its signature: the next
        ``__init__``'s arguments with defaults (for a family, the shared ones, with its own
        ``drop_path_rate`` / ``out_indices`` defaults). Calls still go through ``**kwargs``:
        an unknown keyword is the base's ``TypeError`` naming it."""
        super().__init_subclass__(**kwargs)
        init = vars(cls).get('__init__')
        own = list(inspect.signature(init).parameters.values()) if init else []
        if own and own[-1].kind is own[-1].VAR_KEYWORD:
            defaults = dict(drop_path_rate=cls.default_drop_path_rate,
                            out_indices=cls.default_out_indices)
            shared = [p.replace(kind=p.KEYWORD_ONLY, default=defaults.get(p.name, p.default))
                      for p in inspect.signature(super(cls, cls).__init__).parameters.values()
                      if p.default is not p.empty and p.name not in {q.name for q in own}]
            init.__signature__ = inspect.Signature(own[:-1] + shared)

    @classmethod
    def arguments(cls) -> Dict[str, object]:
        """Every argument the family takes, with its default (its signature)."""
        return {n: p.default for n, p in inspect.signature(cls).parameters.items()}

    def parse_inline_cfg(self, block_types: Sequence[Sequence[str]],
                         window: bool = False) -> List[Dict]:
        """:func:`parse_inline_cfg` of this backbone's ``inline_cfg``, kept as
        ``self.inline_options`` (each stage's switches that differ from the released
        model)."""
        self.inline_options = parse_inline_cfg(self.inline_cfg, block_types,
                                               type(self).__name__, window)
        return self.inline_options

    def _finish_init(self, output_norm_eps: Optional[float] = 1e-5):
        """The end of every family's ``__init__``: a LayerNorm ``norm{i}`` (eps
        ``output_norm_eps``; None: none; with ``norm_cfg``) for each output, ``with_cp``
        on its stages, ``impl`` on every InLine attention, ``frozen_stages`` applied."""
        if output_norm_eps is not None:
            self._add_output_norms(self.dims, output_norm_eps, self.norm_cfg)
        self.with_cp = self._with_cp_arg
        del self._with_cp_arg
        self.impl = self._impl
        self._freeze_stages()

    def extra_repr(self) -> str:
        return f'arch={self.arch_name!r}, impl={self.impl!r}, with_cp={self.with_cp!r}'

    @property
    def impl(self) -> str:
        """How InLine attention runs: ``'auto'``, ``'plain'`` or ``'kernel'`` (the
        ``impl`` argument); setting it sets every InLine attention of the backbone."""
        return self._impl

    @impl.setter
    def impl(self, value: str):
        self._impl = check_impl(value)
        for m in self.modules():
            if isinstance(m, InLineAttention):
                m.impl = self._impl

    @property
    def batched(self) -> Optional[bool]:
        """The older name of :attr:`impl`: True (``'plain'``), False (``'kernel'``) or
        None (``'auto'``)."""
        return {'auto': None, 'plain': True, 'kernel': False}[self._impl]

    @batched.setter
    def batched(self, value: Optional[bool]):
        self.impl = 'auto' if value is None else check_impl(None, value)

    @classmethod
    def resolve_arch(cls, arch: str, **overrides) -> dict:
        """:func:`resolve_arch` with this family's name and presets."""
        return resolve_arch(cls.__name__, cls.presets, arch, **overrides)

    @property
    def out_channels(self) -> Tuple[int, ...]:
        """Channels of each output, in ``out_indices`` order (e.g. a neck's
        ``in_channels``)."""
        return tuple(self.dims[i] for i in self.out_indices)

    def stage_strides(self) -> Tuple[int, ...]:
        """Output stride of every stage (block), from the stem's stride: the first
        convolution of :meth:`_stem_modules` (the patch size)."""
        stem = next(m for s in self._stem_modules() if isinstance(s, nn.Module)
                    for m in s.modules() if isinstance(m, nn.Conv2d))
        first = stem.stride[0]
        return tuple(first * self.stage_downsample ** i for i in range(self.num_stages))

    def stage_info(self, i: int) -> Dict[str, object]:
        """timm's feature description of stage (block) ``i``: ``num_chs``, ``reduction``
        and ``module``, the name of the module whose output it is (the output norm
        ``norm{i}`` where there is one, else the last module the stage owns)."""
        norm = self._output_norm(i)
        module = norm if isinstance(norm, nn.Module) else self._stage_modules(i)[-1]
        name = next(n for n, m in self.named_modules() if m is module)
        return dict(num_chs=int(self.dims[i]), reduction=int(self.stage_strides()[i]),
                    module=name)

    @property
    def feature_info(self) -> List[Dict[str, object]]:
        """One dict per output (``out_indices`` order), as timm's ``feature_info``:
        ``num_chs`` (channels), ``reduction`` (stride in input pixels) and ``module``
        (the module, by name, whose output it is)."""
        return [self.stage_info(i) for i in self.out_indices]

    def no_weight_decay(self) -> Set[str]:
        """Names of the parameters that take no weight decay (timm's
        ``no_weight_decay``): those of every normalisation layer and the family's
        position tables. The configs' ``custom_keys`` (:attr:`no_weight_decay_keys`,
        each with ``decay_mult=0.``) select exactly these."""
        names = set()
        for prefix, m in self.named_modules():
            if isinstance(m, _NORM_LAYERS):
                names |= {f'{prefix}.{n}' if prefix else n
                          for n, _ in m.named_parameters(recurse=False)}
        tables = [k for k in self.no_weight_decay_keys if k != 'norm']
        names |= {n for n, _ in self.named_parameters() if any(k in n for k in tables)}
        return names

    def check_input(self, x: torch.Tensor) -> torch.Tensor:
        """Refuse input the backbone cannot use, saying what to do about it; returns
        ``x`` (under FX the check is one node of the graph and runs with it)."""
        return check_input(x, type(self).__name__, getattr(self, 'in_channels', None),
                           self.min_input_size)

    def valid_map(self, x: torch.Tensor, valid_sizes=None) -> ValidMap:
        """Each image's region of the padded batch ``x``: :func:`.padding.build_valid_map`
        with the path this forward takes (:func:`.impl.choose_path`), ``pad_aware`` and
        ``min_input_size``. ``valid_sizes`` (one ``(h, w)`` per image) overrides reading the
        padding from ``x``."""
        return build_valid_map(x, valid_sizes,
                               path=choose_path(self._impl, x, type(self).__name__),
                               pad_aware=self.pad_aware, min_size=self.min_input_size,
                               exporting=is_exporting())

    def prepare_input(self, x: torch.Tensor,
                      valid_sizes=None) -> Tuple[torch.Tensor, ValidMap]:
        """:meth:`check_input`, then :meth:`valid_map` (:data:`.padding.NO_PADDING`
        for None, the plain path), and the input outside the images zero
        (:func:`.padding.zero_padding`). In a graph being traced or exported, the input's
        height and width are checked in the graph (:func:`.tracing.size_guard`); under FX
        the map is ``NO_PADDING``."""
        x = self.check_input(x)
        if is_fx_proxy(x):
            # An FX graph has no input to read the padding from (as exported graphs).
            return padding_unaware(x, valid_sizes), NO_PADDING
        if is_exporting():
            # The graph records this size's windows and padding: it must refuse others.
            x = size_guard(x)
        valid = self.valid_map(x, valid_sizes)
        return zero_padding(x, valid, sizes_given=valid_sizes is not None), valid

    def __prepare_scriptable__(self):
        refuse_script(self)

    @staticmethod
    def output(norm: nn.Module, x: torch.Tensor, hw: Tuple[int, int],
               valid: ValidMap) -> torch.Tensor:
        """A stage's tokens through its output norm as a ``(B, C, H, W)`` map, zero
        outside each image (the norm's own output is zeroed in place)."""
        return to_nchw(valid.zero_(norm(x)), hw)

    # ------------------------------------------------------------------ outputs
    def _add_output_norms(self, dims: Sequence[int], eps: float = 1e-5,
                          norm_cfg: Optional[dict] = None):
        build = norm_layer(norm_cfg, eps)
        for i in self.out_indices:
            self.add_module(f'norm{i}', build(dims[i]))

    def _output_norm(self, i: int) -> Optional[nn.Module]:
        return getattr(self, f'norm{i}', None)

    # ------------------------------------------------------------------ stages
    def _stage_list(self) -> nn.ModuleList:
        """The stages, each with a ``with_cp`` attribute (``self.stages`` by default)."""
        return self.stages

    def _stage_modules(self, i: int) -> List[nn.Module]:
        return [self._stage_list()[i]]

    def _stem_modules(self) -> List[nn.Module]:
        """What stage 0 depends on (frozen by ``frozen_stages=0``): modules or
        parameters."""
        raise NotImplementedError

    @property
    def with_cp(self) -> Union[bool, Tuple[int, ...]]:
        """Gradient checkpointing: True (every stage), False, or the indices of the stages
        (blocks of a plain ViT) that checkpoint their blocks."""
        return self._with_cp

    @with_cp.setter
    def with_cp(self, value: Union[bool, Sequence[int]]):
        stages = self._stage_list()
        self._with_cp = check_with_cp(value, len(stages))
        for i, stage in enumerate(stages):
            stage.with_cp = self._with_cp is True or (
                self._with_cp is not False and i in self._with_cp)

    # ------------------------------------------------------------------ freezing
    def _freeze_stages(self):
        if self.frozen_stages < 0:
            return
        frozen = list(self._stem_modules())
        for i in range(self.frozen_stages):
            frozen += self._stage_modules(i)
            norm = self._output_norm(i) if i in self.out_indices else None
            if norm is not None:
                frozen.append(norm)
        for m in frozen:
            if isinstance(m, nn.Parameter):
                m.requires_grad = False
                continue
            m.eval()
            for p in m.parameters():
                p.requires_grad = False

    def train(self, mode: bool = True):
        super().train(mode)
        self._freeze_stages()
        return self

    # ------------------------------------------------------------------ weights
    def fresh_keys(self) -> List[str]:
        """State-dict keys a classification checkpoint does not provide: the output
        norms, except the last one where the official final norm initialises it."""
        keep = f'norm{self.num_stages - 1}.' if self.official_final_norm else None
        return [k for k in self.state_dict()
                if re.match(r'norm\d+\.', k) and not (keep and k.startswith(keep))]

    def _convert_official(self, state: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """Official state dict -> this backbone's keys (the family's pure, idempotent
        converter)."""
        raise NotImplementedError

    def convert_checkpoint(self, state: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """Convert (idempotent) and refuse a state dict of another family or variant."""
        state = self._convert_official(state)
        families = [(f.name, f.official_keys) for f in FAMILIES.values()]
        family = identify_family(state, families)
        check_layout(state, type(self).__name__, family, self.depths,
                     getattr(self, 'arch_name', 'custom'), self.presets, self.block_key)
        return self._fit_checkpoint(state)

    def _fit_checkpoint(self, state: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """Resize what a checkpoint of this variant may hold at another size (InLine-Swin:
        relative position bias tables of another window); the state dict by default."""
        return state

    def _init_default(self, m: nn.Module):
        if isinstance(m, nn.Linear):
            trunc_normal_(m.weight, std=.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)

    def init_weights(self):
        cfg = self.init_cfg
        if isinstance(cfg, dict) and cfg.get('type') == 'Pretrained':
            options = {k: v for k, v in cfg.items() if k != 'type'}
            load_pretrained(self, **options)
            self._is_init = True
            return
        if cfg is not None:
            return super().init_weights()
        self.apply(self._init_default)
        self._init_extra()
        self._is_init = True

    def _init_extra(self):
        """Initialisation beyond Linear/LayerNorm defaults (subclasses)."""
