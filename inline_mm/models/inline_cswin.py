"""InLine-CSwin: CSWin Transformer with global InLine stages and LePE stripe stages.

The family's presets, official-key pattern and converter live here, next to the model.
"""
import re
from collections import OrderedDict
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.layers import DropPath, Mlp

from .attention import INLINE, SOFTMAX, InLineAttention
from .base import InLineBackbone, check_heads, parse_stage_types
from .families import Variant, official_url, register_family
from .layers import (BlockStage, crop, drop_path_rates, pad_image, round_up, symbolic, to_nchw,
                     to_tokens, window_merge, window_partition)
from .norm_act import act_layer, norm_layer
from .padding import NO_PADDING, ValidMap
from .tracing import fx_leaf

__all__ = ['InLineCSwin', 'LePEStripeAttention', 'convert_cswin_checkpoint', 'ARCH_SETTINGS',
           'OFFICIAL_KEYS']

#: official (``stage1_conv_embed``, ``merge1``) and converted (``stem.``, ``stages.1.merge``)
#: InLine-CSwin state dicts, and no other family's, have such keys
OFFICIAL_KEYS = (r'^(stage1_conv_embed|stem\.)', r'merge')

VERTICAL, HORIZONTAL, GLOBAL = 'vertical', 'horizontal', 'global'


class LePEStripeAttention(nn.Module):
    """CSWin softmax attention within stripes, plus the LePE term (a depthwise 3x3
    convolution of V inside each stripe).

    A ``'vertical'`` branch attends within stripes of full height and
    ``split_size`` columns (official ``idx=0``), a ``'horizontal'`` one within
    ``split_size`` rows of full width (``idx=1``), a ``'global'`` one over the whole
    map (the last stage). Stripes are laid over the run-time map: a side that is not
    a multiple of ``split_size`` is zero-padded, padded keys are masked out and the
    LePE convolution sees zeros there (as at the map border), so padding never
    changes the result of real tokens; a side shorter than ``split_size`` is one
    stripe of that side.

    Args:
        dim (int): Channels of this branch.
        num_heads (int): Heads of this branch.
        direction (str): ``'vertical'``, ``'horizontal'`` or ``'global'``.
        split_size (int): Stripe width. Default: 7.
        attn_drop (float): Dropout on attention weights. Default: 0.
    """

    def __init__(self, dim: int, num_heads: int, direction: str, split_size: int = 7,
                 attn_drop: float = 0.):
        super().__init__()
        if direction not in (VERTICAL, HORIZONTAL, GLOBAL):
            raise ValueError(f'direction must be vertical, horizontal or global, got '
                             f'{direction!r}')
        if dim % num_heads:
            raise ValueError(f'dim ({dim}) must be divisible by num_heads ({num_heads})')
        self.dim, self.num_heads = dim, num_heads
        self.direction, self.split_size = direction, split_size
        self.attn_drop = attn_drop
        # Official name `get_v`; renamed by the converter.
        self.lepe = nn.Conv2d(dim, dim, 3, padding=1, groups=dim)

    def extra_repr(self) -> str:
        return (f'dim={self.dim}, num_heads={self.num_heads}, direction={self.direction}, '
                f'split_size={self.split_size}')

    def stripe(self, hw: Tuple[int, int], region: Optional[Tuple[int, int]] = None
               ) -> Tuple[int, int]:
        """Stripe ``(sh, sw)`` on an ``hw`` map for an image whose own region is
        ``region`` (default: the whole map): the width is clipped to the image's side,
        the length is the map's."""
        h, w = hw
        rh, rw = region or hw
        s = self.split_size
        # Branches, not min(s, rw): under torch.compile with symbolic sizes min would make
        # the stripe a symbolic Min that every later size carries (see InLine-Swin's layout).
        if self.direction == VERTICAL:
            return h, (s if rw > s else rw)
        if self.direction == HORIZONTAL:
            return (s if rh > s else rh), w
        return h, w

    def attend(self, qkv: torch.Tensor, hw: Tuple[int, int],
               token_mean: Optional[torch.Tensor] = None,
               valid: ValidMap = NO_PADDING) -> torch.Tensor:
        """The ``attend`` call of :mod:`.attention` (``token_mean`` is not used). Keys
        outside an image are masked and its LePE sees zeros there (as at its border
        alone). The stripes are the map's for every image: an image narrower than the
        stripe lies in the first stripe, which then holds exactly its tokens as the
        stripe clipped to its side would alone, and a wider one has the stripes it has
        alone, its last one padded; so no image needs a layout of its own."""
        b, n, c3 = qkv.shape
        h, w = hw
        keys = valid.pixels if valid.is_padded else None
        return self._stripes(qkv.reshape(b, h, w, c3), self.stripe(hw), keys).reshape(b, n, -1)

    def _stripes(self, x: torch.Tensor, stripe: Tuple[int, int],
                 keys: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``(B, H, W, 3C)`` q/k/v -> ``(B, H, W, C)`` attention within ``stripe``-sized
        windows; ``keys`` ``(B, H, W)`` bool marks the positions that may be attended
        to."""
        b, h, w, c3 = x.shape
        c = c3 // 3
        heads, d = self.num_heads, c // self.num_heads
        sh, sw = stripe
        hp = h if h <= sh else round_up(h, sh)
        wp = w if w <= sw else round_up(w, sw)
        if symbolic(h, w) or hp != h or wp != w:
            # Padding after the projection: padded q/k/v are exact zeros, like the
            # LePE convolution's own zero padding at the map border.
            x = F.pad(x, (0, 0, 0, wp - w, 0, hp - h))
        windows = window_partition(x, sh, sw)                       # (B*nW, sh*sw, 3C)
        bw, nt = windows.shape[:2]
        q, k, v = windows.view(bw, nt, 3, heads, d).permute(2, 0, 3, 1, 4)

        v_img = v.transpose(-2, -1).reshape(bw, c, sh, sw)               # a copy of V

        mask = None
        if keys is not None:
            keys = F.pad(keys, (0, wp - w, 0, hp - h))
            inside = window_partition(keys[..., None], sh, sw).view(bw, 1, 1, nt)
            # The LePE of an image sees zeros outside it; the masked keys need no zeros.
            v_img = v_img * inside.view(bw, 1, sh, sw)
            # A stripe wholly outside its image would have no key (NaN rows): let it
            # see its first position; its outputs are discarded.
            # (Not written in place into a slice: a traced graph exports no in-place or.)
            mask = torch.cat([inside[..., :1] | ~inside.any(dim=-1, keepdim=True),
                              inside[..., 1:]], dim=-1)
        elif symbolic(h, w) or hp != h or wp != w:
            # Built by comparison, not by writing into a slice: a slice view of the padded
            # map would have its contiguity guarded (whether the side is a multiple).
            real = ((torch.arange(hp, device=x.device) < h)[:, None]
                    & (torch.arange(wp, device=x.device) < w)[None, :]).view(1, hp, wp, 1)
            mask = window_partition(real, sh, sw).view(bw // b, 1, 1, nt)  # (nW, 1, 1, N)
            mask = mask.repeat(b, 1, 1, 1)
        lepe = self.lepe(v_img).reshape(bw, heads, d, nt).transpose(-2, -1)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=self.attn_drop if self.training else 0.)
        out = (out + lepe.to(out.dtype)).transpose(1, 2).reshape(bw, nt, c)
        out = window_merge(out, sh, sw, hp, wp, b)
        return crop(out, h, w)


def _inline_branches(dim: int, num_heads: int, split_size: Optional[int], last_stage: bool,
                     attn_drop: float, **inline_options) -> List[nn.Module]:
    """One global InLine branch with LePE (the block owns qkv and the projection);
    ``inline_options``: the paper's switches (``InLineAttention``)."""
    return [InLineAttention(dim, num_heads, proj=False, lepe=True, attn_drop=attn_drop,
                            **inline_options)]


def _stripe_branches(dim: int, num_heads: int, split_size: Optional[int], last_stage: bool,
                     attn_drop: float) -> List[nn.Module]:
    """Vertical and horizontal stripes on half the channels each; global in the last stage."""
    if last_stage:
        return [LePEStripeAttention(dim, num_heads, GLOBAL, attn_drop=attn_drop)]
    return [LePEStripeAttention(dim // 2, num_heads // 2, direction, split_size, attn_drop)
            for direction in (VERTICAL, HORIZONTAL)]


# Under FX the sides are unknown while tracing: the stem's padding is a node (as in layers).
torch.fx.wrap('pad_image')

#: the attention branches of each block type, each called as ``attend`` in the contract of
#: :mod:`.attention`
ATTENTION_TYPES = {INLINE: _inline_branches, SOFTMAX: _stripe_branches}


class CSwinBlock(nn.Module):
    """CSWin block: shared qkv and projection around one or two attention branches.

    ``'inline'`` blocks have one global InLine branch over every channel, called on the
    normalised tokens with the block's ``qkv`` as its projection; its local kernels are
    predicted from the block input's token mean (before ``norm1``, as in the official
    code) and it adds the LePE term. ``'softmax'`` blocks have two stripe branches
    (vertical and horizontal, half the channels and heads each), or, in the last stage, one
    global branch, each called as ``branch.attend(qkv, hw)`` on its share of the
    projection's channels. ``inline_options`` (the paper's switches,
    ``InLineAttention``) go to the InLine branch; with ``local_residual=False`` its LePE
    term stays (CSwin's positional term, in the softmax blocks too).
    """

    def __init__(self, dim: int, num_heads: int, attn_type: str, split_size: int,
                 last_stage: bool, mlp_ratio: float, qkv_bias: bool, drop: float,
                 attn_drop: float, drop_path: float, inline_options: Optional[dict] = None,
                 norm_layer: Callable[[int], nn.Module] = nn.LayerNorm,
                 act_layer: Callable[[], nn.Module] = nn.GELU):
        super().__init__()
        self.attn_type = attn_type
        self.norm1 = norm_layer(dim)
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attns = nn.ModuleList(ATTENTION_TYPES[attn_type](dim, num_heads, split_size,
                                                              last_stage, attn_drop,
                                                              **(inline_options or {})))
        self.branch_dims = [a.dim for a in self.attns]
        # Only the predicted local kernels read the block input's mean.
        self._needs_mean = attn_type == INLINE and self.attns[0].local_residual
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(drop)
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.norm2 = norm_layer(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), act_layer=act_layer, drop=drop)

    @fx_leaf
    def forward(self, x: torch.Tensor, hw: Tuple[int, int],
                valid: ValidMap = NO_PADDING) -> torch.Tensor:
        b, n, c = x.shape
        if self.attn_type == INLINE:
            # One branch over every channel: it takes the block's projection (the kernel
            # folds it in) and the block input's mean.
            mean = valid.mean(x) if self._needs_mean else None
            y = self.attns[0](self.norm1(x), hw, mean, valid, projection=self.qkv)
        else:
            qkv = self.qkv(self.norm1(x)).view(b, n, 3, c).split(self.branch_dims, dim=-1)
            y = [attn.attend(part.reshape(b, n, -1), hw, None, valid)
                 for attn, part in zip(self.attns, qkv)]
            y = y[0] if len(y) == 1 else torch.cat(y, dim=-1)
        x = x + self.drop_path(self.proj_drop(self.proj(y)))
        return x + self.drop_path(self.mlp(self.norm2(x)))


class ConvStem(nn.Module):
    """7x7 stride-4 convolution + LayerNorm; pads the image to a multiple of 4 so the
    map is ``ceil(H / 4) x ceil(W / 4)`` (at 224 the padding is empty)."""

    def __init__(self, in_channels: int, dim: int,
                 norm_layer: Callable[[int], nn.Module] = nn.LayerNorm):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, dim, 7, 4, 2)
        self.norm = norm_layer(dim)

    def forward(self, x: torch.Tensor):
        x, hw = to_tokens(self.conv(pad_image(x, 4)))
        return self.norm(x), hw


class ConvMerge(nn.Module):
    """3x3 stride-2 convolution (padding 1) + LayerNorm: ``ceil(H/2) x ceil(W/2)``."""

    def __init__(self, dim: int, dim_out: int,
                 norm_layer: Callable[[int], nn.Module] = nn.LayerNorm):
        super().__init__()
        self.conv = nn.Conv2d(dim, dim_out, 3, 2, 1)
        self.norm = norm_layer(dim_out)

    def forward(self, x: torch.Tensor, hw: Tuple[int, int]):
        x, hw = to_tokens(self.conv(to_nchw(x, hw)))
        return self.norm(x), hw


class CSwinStage(BlockStage):
    """The merge in front of the stage (none in stage 0), then the blocks."""

    def __init__(self, merge: Optional[ConvMerge], blocks: List[CSwinBlock]):
        super().__init__(blocks)
        self.merge = merge

    def forward(self, x: torch.Tensor, hw: Tuple[int, int], valid: ValidMap):
        """Tokens (zero outside the images of ``valid``) -> the stage's tokens, map size
        and the images' regions there."""
        if self.merge is not None:
            x, hw = self.merge(x, hw)
            valid = valid.scaled(hw, 2)
        return self.run_blocks(x, hw, valid), hw, valid


class InLineCSwin(InLineBackbone):
    """InLine-CSwin backbone.

    The CSWin Transformer of Han et al., "Bridging the Divide: Reconsidering
    Softmax and Linear Attention", NeurIPS 2024 (arXiv 2412.06590): ``'inline'``
    stages use one InLine attention branch over the whole feature map at every
    input size (in the released 224 models their "stripe" already was the whole
    map) plus CSWin's LePE term; ``'softmax'`` stages keep CSWin's cross-shaped
    window attention, two LePE stripe branches of widths ``split_sizes``, and one
    global branch in the last stage. Any input of at least 32x32 works, square or
    not: the stem pads to a multiple of 4, stripes pad, compute and crop.

    Args:
        arch, embed_dims, depths, num_heads, stage_types: As :class:`InLineSwin`'s
            (presets ``'tiny'``, ``'small'``, ``'base'``); ``num_heads`` even where
            softmax blocks split them between two branches.
        split_sizes (Sequence[int]): Stripe width of the softmax blocks of every
            stage but the last (which is global). Default: (1, 2, 7).
        mlp_ratio (float): MLP hidden / embedding channels. Default: 4.
        **kwargs: What every InLine backbone takes (``InLineBackbone``): ``out_indices``
            (default: every stage; the official final ``norm`` initialises the last
            output norm), ``frozen_stages`` (0 freezes the stem; a stage owns the merge in
            front of it), ``with_cp``, ``drop_path_rate`` (default 0.2), ``impl``,
            ``pad_aware``, ``inline_cfg`` (``local_residual=False`` keeps the LePE term,
            CSwin's positional term), ``norm_cfg`` (eps 1e-5 without one), ``init_cfg``,
            ... Outputs: ``H_i = ceil(H / 2**(i + 2))`` (likewise ``W_i``).
    """

    official_keys = OFFICIAL_KEYS

    def __init__(self, arch: str = 'tiny', embed_dims: Optional[int] = None,
                 depths: Optional[Sequence[int]] = None,
                 num_heads: Optional[Sequence[int]] = None,
                 stage_types: Optional[Sequence[Union[str, Sequence[str]]]] = None,
                 split_sizes: Sequence[int] = (1, 2, 7), mlp_ratio: float = 4., **kwargs):
        cfg = self.resolve_arch(arch, embed_dims=embed_dims, depths=depths, num_heads=num_heads,
                                stage_types=stage_types)
        embed_dims, depths, num_heads = cfg['embed_dims'], cfg['depths'], cfg['num_heads']
        split_sizes = tuple(split_sizes)
        n = len(depths)
        if len(num_heads) != n:
            raise ValueError(f'num_heads {num_heads} and depths {depths} must have one entry '
                             'per stage')
        if len(split_sizes) != n - 1 or any(s < 1 for s in split_sizes):
            raise ValueError(f'split_sizes {split_sizes} must give one positive stripe width '
                             f'for each of the first {n - 1} stages (the last stage is global)')
        dims = [embed_dims * 2 ** i for i in range(n)]
        super().__init__(dims, depths, cfg['arch_name'], **kwargs)
        block_types = parse_stage_types(cfg['stage_types'], depths)
        check_heads(dims, num_heads)
        for i, h in enumerate(num_heads):
            if i < n - 1 and SOFTMAX in block_types[i] and h % 2:
                raise ValueError(f'stage {i}: softmax blocks split the heads between two '
                                 f'stripe branches, so num_heads must be even (got {h})')
        self.parse_inline_cfg(block_types)
        self.min_input_size = 2 ** (n + 1)

        norm, act = norm_layer(self.norm_cfg, 1e-5), act_layer(self.act_cfg)
        self.stem = ConvStem(self.in_channels, embed_dims, norm)
        dpr = drop_path_rates(self.drop_path_rate, depths)
        self.stages = nn.ModuleList()
        for i, depth in enumerate(depths):
            last = i == n - 1
            blocks = [CSwinBlock(dims[i], num_heads[i], block_types[i][j],
                                 None if last else split_sizes[i], last, mlp_ratio,
                                 self.qkv_bias, self.drop_rate, self.attn_drop_rate, dpr[i][j],
                                 self.inline_options[i] if block_types[i][j] == INLINE else None,
                                 norm, act)
                      for j in range(depth)]
            merge = ConvMerge(dims[i - 1], dims[i], norm) if i else None
            self.stages.append(CSwinStage(merge, blocks))
        self._finish_init()

    def _stem_modules(self):
        return [self.stem]

    def _convert_official(self, state: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        return convert_cswin_checkpoint(state, last_stage=len(self.dims) - 1)

    def forward(self, x: torch.Tensor, valid_sizes=None) -> Tuple[torch.Tensor, ...]:
        x, valid = self.prepare_input(x, valid_sizes)
        x, hw = self.stem(x)
        valid = valid.scaled(hw, 4)
        outs = []
        for i, stage in enumerate(self.stages):
            # The merge's 3x3 cells see zeros past an image.
            x, hw, valid = stage(valid.zero_own(x), hw, valid)
            if i in self.out_indices:
                outs.append(self.output(self._output_norm(i), x, hw, valid))
        return tuple(outs)


_CSWIN_RENAMES = [
    (re.compile(r'^stage1_conv_embed\.0\.'), lambda m: 'stem.conv.'),
    (re.compile(r'^stage1_conv_embed\.2\.'), lambda m: 'stem.norm.'),
    (re.compile(r'^stage(\d+)\.(\d+)\.'), lambda m: f'stages.{int(m[1]) - 1}.blocks.{m[2]}.'),
    (re.compile(r'^merge(\d+)\.'), lambda m: f'stages.{m[1]}.merge.'),
]


def convert_cswin_checkpoint(state: Dict[str, torch.Tensor],
                             last_stage: int = 3) -> Dict[str, torch.Tensor]:
    """Official InLine-CSwin state dict -> :class:`InLineCSwin` keys (pure, idempotent).

    ``stage1_conv_embed`` becomes ``stem``, ``stage{i}.{j}`` ``stages.{i-1}.blocks.{j}``,
    ``merge{i}`` (in front of official stage ``i+1``) ``stages.{i}.merge``, each
    branch's ``get_v`` ``lepe``, and the final ``norm`` the last output norm. The
    classifier goes.
    """
    out = OrderedDict()
    for k, v in state.items():
        if k.startswith('head.'):
            continue
        if k.startswith('norm.'):
            k = f'norm{last_stage}.' + k[len('norm.'):]
        for pattern, repl in _CSWIN_RENAMES:
            k, hit = pattern.subn(repl, k, count=1)
            if hit:
                break
        out[k.replace('.get_v.', '.lepe.')] = v
    return out


# ------------------------------------------------------------------ the family and its variants
_CSWIN_TYPES = (INLINE, INLINE, SOFTMAX, SOFTMAX)
register_family(
    InLineCSwin, convert=convert_cswin_checkpoint, strides=(4, 8, 16, 32), first_conv='stem.conv',
    smoke=dict(embed_dims=16, depths=(1, 2, 2, 1), num_heads=(2, 2, 4, 8),
               stage_types=('inline', ('inline', 'softmax'), 'softmax', 'softmax'),
               drop_path_rate=0.),
    variants=[
        Variant('tiny', dict(embed_dims=64, depths=(2, 4, 18, 1), num_heads=(2, 4, 8, 16),
                             stage_types=_CSWIN_TYPES),
                weights='cswin_t', url=official_url('49fa2ecc543647c4b970')),
        Variant('small', dict(embed_dims=64, depths=(3, 6, 29, 2), num_heads=(2, 4, 8, 16),
                              stage_types=_CSWIN_TYPES),
                weights='cswin_s', url=official_url('59f4e65f776f4052b93c')),
        Variant('base', dict(embed_dims=96, depths=(3, 6, 29, 2), num_heads=(4, 8, 16, 32),
                             stage_types=_CSWIN_TYPES),
                weights='cswin_b', url=official_url('91e17121df284ae38521')),
    ])
#: the presets by arch (declared by the variants above)
ARCH_SETTINGS = InLineCSwin.presets
