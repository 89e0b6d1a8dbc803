"""InLine-CSwin: CSWin Transformer with global InLine stages and LePE stripe stages."""
import re
from collections import OrderedDict
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint as cp
from timm.layers import DropPath, Mlp

from ...checkpoint import check_layout
from ...registry import register_backbone
from ..inline_attention import InLineAttention
from .base import INLINE, InLineBackbone, parse_stage_types, resolve_arch, to_nchw
from .inline_swin import _window_merge, _window_partition

__all__ = ['InLineCSwin', 'LePEStripeAttention', 'convert_cswin_checkpoint']

ARCH_SETTINGS = {
    'tiny': dict(embed_dims=64, depths=(2, 4, 18, 1), num_heads=(2, 4, 8, 16)),
    'small': dict(embed_dims=64, depths=(3, 6, 29, 2), num_heads=(2, 4, 8, 16)),
    'base': dict(embed_dims=96, depths=(3, 6, 29, 2), num_heads=(4, 8, 16, 32)),
}
for _preset in ARCH_SETTINGS.values():
    _preset['stage_types'] = ('inline', 'inline', 'softmax', 'softmax')

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

    def stripe(self, hw: Tuple[int, int]) -> Tuple[int, int]:
        h, w = hw
        if self.direction == VERTICAL:
            return h, min(self.split_size, w)
        if self.direction == HORIZONTAL:
            return min(self.split_size, h), w
        return h, w

    def forward(self, qkv: torch.Tensor, hw: Tuple[int, int]) -> torch.Tensor:
        """``qkv``: ``(B, N, 3, C)`` of an ``hw`` map; returns ``(B, N, C)``."""
        b, n, _, c = qkv.shape
        h, w = hw
        heads, d = self.num_heads, c // self.num_heads
        sh, sw = self.stripe(hw)
        hp, wp = -(-h // sh) * sh, -(-w // sw) * sw
        x = qkv.reshape(b, h, w, 3 * c)
        if hp != h or wp != w:
            # Padding after the projection: padded q/k/v are exact zeros, like the
            # LePE convolution's own zero padding at the map border.
            x = F.pad(x, (0, 0, 0, wp - w, 0, hp - h))
        windows = _window_partition(x, sh, sw)                       # (B*nW, sh*sw, 3C)
        bw, nt = windows.shape[:2]
        q, k, v = windows.view(bw, nt, 3, heads, d).permute(2, 0, 3, 1, 4)

        v_img = v.transpose(-2, -1).reshape(bw, c, sh, sw)
        lepe = self.lepe(v_img).reshape(bw, heads, d, nt).transpose(-2, -1)

        mask = None
        if hp != h or wp != w:
            real = torch.zeros(1, hp, wp, 1, dtype=torch.bool, device=x.device)
            real[:, :h, :w] = True
            mask = _window_partition(real, sh, sw).view(-1, 1, 1, nt)    # (nW, 1, 1, N)
            mask = mask.repeat(b, 1, 1, 1)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=self.attn_drop if self.training else 0.)
        out = (out + lepe.to(out.dtype)).transpose(1, 2).reshape(bw, nt, c)
        out = _window_merge(out, sh, sw, hp, wp)
        return out[:, :h, :w].reshape(b, n, c)


class CSwinBlock(nn.Module):
    """CSWin block: shared qkv and projection around one or two attention branches.

    ``'inline'`` blocks have one global InLine branch whose local kernels are
    predicted from the block input's token mean (before ``norm1``, as in the
    official code) and which adds the LePE term. ``'softmax'`` blocks have two
    stripe branches (vertical and horizontal, half the channels and heads each),
    or, in the last stage, one global branch.
    """

    def __init__(self, dim: int, num_heads: int, attn_type: str, split_size: int,
                 last_stage: bool, mlp_ratio: float, qkv_bias: bool, drop: float,
                 attn_drop: float, drop_path: float):
        super().__init__()
        self.attn_type = attn_type
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        if attn_type == INLINE:
            self.attns = nn.ModuleList([InLineAttention(dim, num_heads, proj=False, lepe=True,
                                                        attn_drop=attn_drop)])
        elif last_stage:
            self.attns = nn.ModuleList([LePEStripeAttention(dim, num_heads, GLOBAL,
                                                            attn_drop=attn_drop)])
        else:
            self.attns = nn.ModuleList([
                LePEStripeAttention(dim // 2, num_heads // 2, direction, split_size, attn_drop)
                for direction in (VERTICAL, HORIZONTAL)])
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(drop)
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), act_layer=nn.GELU, drop=drop)

    def forward(self, x: torch.Tensor, hw: Tuple[int, int]) -> torch.Tensor:
        b, n, c = x.shape
        qkv = self.qkv(self.norm1(x))
        if self.attn_type == INLINE:
            y = self.attns[0].attend(qkv, hw, x.mean(dim=1))
        elif len(self.attns) == 1:
            y = self.attns[0](qkv.view(b, n, 3, c), hw)
        else:
            qkv = qkv.view(b, n, 3, c)
            half = c // 2
            y = torch.cat([self.attns[0](qkv[..., :half], hw),
                           self.attns[1](qkv[..., half:], hw)], dim=-1)
        x = x + self.drop_path(self.proj_drop(self.proj(y)))
        return x + self.drop_path(self.mlp(self.norm2(x)))


class ConvStem(nn.Module):
    """7x7 stride-4 convolution + LayerNorm; pads the image to a multiple of 4 so the
    map is ``ceil(H / 4) x ceil(W / 4)`` (at 224 the padding is empty)."""

    def __init__(self, in_channels: int, dim: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, dim, 7, 4, 2)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor):
        h, w = x.shape[-2:]
        if h % 4 or w % 4:
            x = F.pad(x, (0, -w % 4, 0, -h % 4))
        x = self.conv(x)
        hw = (x.shape[2], x.shape[3])
        return self.norm(x.flatten(2).transpose(1, 2)), hw


class ConvMerge(nn.Module):
    """3x3 stride-2 convolution (padding 1) + LayerNorm: ``ceil(H/2) x ceil(W/2)``."""

    def __init__(self, dim: int, dim_out: int):
        super().__init__()
        self.conv = nn.Conv2d(dim, dim_out, 3, 2, 1)
        self.norm = nn.LayerNorm(dim_out)

    def forward(self, x: torch.Tensor, hw: Tuple[int, int]):
        x = self.conv(to_nchw(x, hw))
        hw = (x.shape[2], x.shape[3])
        return self.norm(x.flatten(2).transpose(1, 2)), hw


class CSwinStage(nn.Module):
    def __init__(self, merge: Optional[ConvMerge], blocks: List[CSwinBlock]):
        super().__init__()
        self.merge = merge
        self.blocks = nn.ModuleList(blocks)
        self.with_cp = False

    def forward(self, x, hw):
        if self.merge is not None:
            x, hw = self.merge(x, hw)
        for blk in self.blocks:
            if self.with_cp and x.requires_grad:
                x = cp.checkpoint(blk, x, hw, use_reentrant=False)
            else:
                x = blk(x, hw)
        return x, hw


@register_backbone
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
        arch (str): Preset, ``'tiny'``, ``'small'`` or ``'base'`` (the released
            layouts, see ``ARCH_SETTINGS``). The explicit arguments below, when
            given, override the preset. Default: ``'tiny'``.
        embed_dims (int, optional): Channels of stage 0; doubled at each stage.
        depths (Sequence[int], optional): Blocks per stage.
        num_heads (Sequence[int], optional): Heads per stage (even where softmax
            blocks split them between two branches).
        stage_types (Sequence, optional): Attention per stage: ``'inline'`` or
            ``'softmax'`` for the whole stage, or a sequence with one type per block.
        split_sizes (Sequence[int]): Stripe width of the softmax blocks of every
            stage but the last (which is global). Default: (1, 2, 7).
        in_channels (int): Input channels. Default: 3.
        mlp_ratio (float): MLP hidden / embedding channels. Default: 4.
        qkv_bias (bool): Bias of the qkv projections. Default: True.
        drop_rate (float): Dropout after projections and in the MLP. Default: 0.
        attn_drop_rate (float): Attention dropout. Default: 0.
        drop_path_rate (float): Stochastic depth, linearly increasing over blocks.
            Default: 0.2.
        out_indices (Sequence[int]): Stages whose outputs are returned, each through
            its own LayerNorm ``norm{i}``; the official final ``norm`` initialises
            the last one. Default: (0, 1, 2, 3).
        frozen_stages (int): Freeze the stem (0) and stages ``< i`` (with their
            output norms; a stage owns the merge in front of it); -1 freezes
            nothing. Default: -1.
        with_cp (bool): Gradient checkpointing per block (non-reentrant) while
            training. Default: False.
        init_cfg (dict, optional): ``dict(type='Pretrained', checkpoint=PATH)`` loads
            an official ImageNet file, a state dict, an OpenMMLab checkpoint or a
            converted ``.safetensors``; extra keys: ``allow_pickle`` (bool, trust the
            file), ``checkpoint_key`` (e.g. ``'state_dict_ema'`` for the official EMA
            weights), ``min_match`` (fraction of tensors that must be found, default
            0.9). Default: None.

    Returns (forward):
        tuple[Tensor]: ``(B, C_i, H_i, W_i)`` for each ``i`` in ``out_indices``, with
        ``H_i = ceil(H / 2**(i + 2))`` (likewise ``W_i``).
    """

    def __init__(self, arch: str = 'tiny', embed_dims: Optional[int] = None,
                 depths: Optional[Sequence[int]] = None,
                 num_heads: Optional[Sequence[int]] = None,
                 stage_types: Optional[Sequence[Union[str, Sequence[str]]]] = None,
                 split_sizes: Sequence[int] = (1, 2, 7), in_channels: int = 3,
                 mlp_ratio: float = 4., qkv_bias: bool = True, drop_rate: float = 0.,
                 attn_drop_rate: float = 0., drop_path_rate: float = 0.2,
                 out_indices: Sequence[int] = (0, 1, 2, 3), frozen_stages: int = -1,
                 with_cp: bool = False, init_cfg: Optional[dict] = None):
        cfg = resolve_arch('InLineCSwin', ARCH_SETTINGS, arch, embed_dims=embed_dims,
                           depths=depths, num_heads=num_heads, stage_types=stage_types)
        embed_dims = cfg['embed_dims']
        depths = cfg['depths']
        num_heads = cfg['num_heads']
        stage_types = cfg['stage_types']
        split_sizes = tuple(split_sizes)
        n = len(depths)
        if len(num_heads) != n:
            raise ValueError(f'num_heads {num_heads} and depths {depths} must have one entry '
                             'per stage')
        if len(split_sizes) != n - 1 or any(s < 1 for s in split_sizes):
            raise ValueError(f'split_sizes {split_sizes} must give one positive stripe width '
                             f'for each of the first {n - 1} stages (the last stage is global)')
        super().__init__(out_indices, frozen_stages, n, init_cfg=init_cfg)
        self.arch_name = cfg['arch_name']
        block_types = parse_stage_types(stage_types, depths)
        dims = [embed_dims * 2 ** i for i in range(n)]
        for i, (d, h) in enumerate(zip(dims, num_heads)):
            if d % h:
                raise ValueError(f'stage {i}: {d} channels are not divisible by {h} heads')
            if i < n - 1 and 'softmax' in block_types[i] and h % 2:
                raise ValueError(f'stage {i}: softmax blocks split the heads between two '
                                 f'stripe branches, so num_heads must be even (got {h})')
        self.dims = dims
        self.depths = depths
        self.in_channels = in_channels
        self.min_input_size = 2 ** (n + 1)

        self.stem = ConvStem(in_channels, embed_dims)
        dpr = torch.linspace(0, drop_path_rate, sum(depths), device='cpu').tolist()
        self.stages = nn.ModuleList()
        for i, depth in enumerate(depths):
            start = sum(depths[:i])
            last = i == n - 1
            blocks = [CSwinBlock(dims[i], num_heads[i], block_types[i][j],
                                 None if last else split_sizes[i], last, mlp_ratio, qkv_bias,
                                 drop_rate, attn_drop_rate, dpr[start + j])
                      for j in range(depth)]
            merge = ConvMerge(dims[i - 1], dims[i]) if i else None
            self.stages.append(CSwinStage(merge, blocks))
        self._add_output_norms(dims)
        self.with_cp = with_cp
        self._freeze_stages()

    def _stem_modules(self):
        return [self.stem]

    def convert_checkpoint(self, state: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        state = convert_cswin_checkpoint(state, last_stage=len(self.dims) - 1)
        check_layout(self, state, ARCH_SETTINGS)
        return state

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        self.check_input(x)
        x, hw = self.stem(x)
        outs = []
        for i, stage in enumerate(self.stages):
            x, hw = stage(x, hw)
            if i in self.out_indices:
                outs.append(to_nchw(getattr(self, f'norm{i}')(x), hw))
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
