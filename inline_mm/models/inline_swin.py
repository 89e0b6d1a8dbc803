"""InLine-Swin: Swin Transformer whose InLine stages attend globally at linear cost.

The family's presets, official-key pattern and converter live here, next to the model.
"""
import math
from collections import OrderedDict
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.layers import trunc_normal_

from .attention import INLINE, SOFTMAX, InLineAttention
from .base import InLineBackbone, check_heads, parse_inline_cfg, parse_stage_types
from .checkpoint import print_log
from .norm_act import act_layer, norm_layer
from .layers import (BlockStage, PatchEmbed, TransformerBlock, crop, drop_path_rates,
                     pad_amount, round_up, symbolic, window_merge, window_partition)
from .padding import NO_PADDING, ValidMap
from .tracing import fx_leaf

__all__ = ['InLineSwin', 'WindowAttention', 'convert_swin_checkpoint',
           'resize_relative_position_bias_table', 'ARCH_SETTINGS', 'OFFICIAL_KEYS']

#: official and converted InLine-Swin state dicts, and no other family's, have such keys
OFFICIAL_KEYS = (r'^layers\.0\.blocks\.',)


def _b_stage3(depth=18, inline_blocks=2):
    return (INLINE,) * inline_blocks + (SOFTMAX,) * (depth - inline_blocks)


ARCH_SETTINGS = {
    'tiny': dict(embed_dims=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24),
                 stage_types=('inline', 'inline', 'inline', 'softmax')),
    'small': dict(embed_dims=96, depths=(2, 2, 18, 2), num_heads=(3, 6, 12, 24),
                  stage_types=('inline', 'inline', 'softmax', 'softmax')),
    'base': dict(embed_dims=128, depths=(2, 2, 18, 2), num_heads=(4, 8, 16, 32),
                 stage_types=('inline', 'inline', _b_stage3(), 'softmax')),
}


def _region_ids(size: int, padded: int, window: int, shift: int, device) -> torch.Tensor:
    """Per-position region label along one axis of a padded, shifted map.

    Regions are those of the Swin shift mask; padded positions get label -1 so that
    they can be masked out as keys.
    """
    ids = torch.zeros(padded, dtype=torch.long, device=device)
    if shift:
        ids[padded - window:padded - shift] = 1
        ids[padded - shift:] = 2
    valid = torch.arange(padded, device=device) < size
    # Shift the validity the same way the features are rolled.
    valid = torch.roll(valid, -shift, 0) if shift else valid
    return torch.where(valid, ids, torch.full_like(ids, -1))


class WindowAttention(nn.Module):
    """Swin (shifted) window softmax attention with relative position bias.

    Windows and shifts are derived from the run-time map size: a map side that fits
    in one window uses a window of exactly that side, unpadded and unshifted (the
    official behaviour at 224: the 7x7 last stage is neither padded nor shifted).
    Other sides are padded to a multiple of the window; padded positions are masked
    out as keys, so padding never changes the result of real tokens.

    Args:
        dim (int): Channels.
        num_heads (int): Heads.
        window_size (int): Window side. Default: 7.
        shift (bool): Shift the windows by half a window (Swin's odd blocks).
            Default: False.
        qkv_bias (bool): Default: True.
        attn_drop (float): Dropout on attention weights. Default: 0.
        proj_drop (float): Dropout after the projection. Default: 0.
    """

    def __init__(self, dim: int, num_heads: int, window_size: int = 7, shift: bool = False,
                 qkv_bias: bool = True, attn_drop: float = 0., proj_drop: float = 0.):
        super().__init__()
        if dim % num_heads:
            raise ValueError(f'dim ({dim}) must be divisible by num_heads ({num_heads})')
        self.dim, self.num_heads, self.window_size = dim, num_heads, window_size
        self.shift = shift
        self.scale = (dim // num_heads) ** -0.5
        self.relative_position_bias_table = nn.Parameter(
            torch.zeros((2 * window_size - 1) ** 2, num_heads))
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)
        trunc_normal_(self.relative_position_bias_table, std=.02)

    def extra_repr(self) -> str:
        return (f'dim={self.dim}, num_heads={self.num_heads}, window_size={self.window_size}, '
                f'shift={self.shift}')

    def _relative_bias(self, wh: int, ww: int) -> torch.Tensor:
        ws = self.window_size
        dev = self.relative_position_bias_table.device
        ys, xs = torch.meshgrid(torch.arange(wh, device=dev), torch.arange(ww, device=dev),
                                indexing='ij')
        ys, xs = ys.flatten(), xs.flatten()
        index = ((ys[:, None] - ys[None, :] + ws - 1) * (2 * ws - 1)
                 + (xs[:, None] - xs[None, :] + ws - 1))
        bias = self.relative_position_bias_table[index.flatten()]
        return bias.view(wh * ww, wh * ww, -1).permute(2, 0, 1)          # (heads, N, N)

    def layout(self, hw: Tuple[int, int]) -> Tuple[int, int, int, int]:
        """Window ``(wh, ww)`` and shift ``(sh, sw)`` for a map (or image region) of
        size ``hw``: a side that fits in one window is one unshifted window of it."""
        h, w = hw
        ws = self.window_size
        # Branches, not min(ws, h): with symbolic sizes (torch.compile dynamic) min would
        # make the window itself a symbolic Min(7, h), and every size, index and mask
        # after it an expression that grows until sympy never finishes; a branch is one
        # guard (h > 7) and leaves the window a constant.
        wide_h, wide_w = h > ws, w > ws
        sh = ws // 2 if self.shift and wide_h else 0
        sw = ws // 2 if self.shift and wide_w else 0
        return ws if wide_h else h, ws if wide_w else w, sh, sw

    def forward(self, x: torch.Tensor, hw: Tuple[int, int],
                token_mean: Optional[torch.Tensor] = None,
                valid: ValidMap = NO_PADDING) -> torch.Tensor:
        """The call of :mod:`.attention` (``token_mean`` is not used). Each image gets
        the windows and shift it would get alone (:meth:`layout` of its own size;
        images that differ run separately) and keys outside it are masked."""
        b, n, c = x.shape
        x = valid.zero(x).view(b, hw[0], hw[1], c)
        return valid.run_grouped(self._windows, x, self.layout).reshape(b, n, c)

    def _windows(self, x: torch.Tensor, layout: Tuple[int, int, int, int],
                 keys: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``(B, H, W, C)`` -> ``(B, H, W, C)`` attention in the windows of ``layout``;
        ``keys`` ``(B, H, W)`` bool marks the positions that may be attended to."""
        b, h, w, c = x.shape
        wh, ww, sh, sw = layout
        # A side within its window is one window of it (round_up would be the same, but
        # with symbolic sizes only this form is known to be h without a guard).
        hp = h if h <= wh else round_up(h, wh)
        wp = w if w <= ww else round_up(w, ww)
        dynamic = symbolic(h, w)
        if dynamic or hp != h or wp != w:
            x = F.pad(x, (0, 0, 0, wp - w, 0, hp - h))
        if sh or sw:
            x = torch.roll(x, shifts=(-sh, -sw), dims=(1, 2))
        windows = window_partition(x, wh, ww)                            # (B*nW, N, C)

        bw, nt, _ = windows.shape
        qkv = self.qkv(windows).reshape(bw, nt, 3, self.num_heads, c // self.num_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        attn = attn + self._relative_bias(wh, ww).unsqueeze(0).to(attn.dtype)
        mask = self._mask(h, w, hp, wp, wh, ww, sh, sw, x.device, dynamic)
        if keys is not None:
            # Each image's padding is masked like the shift regions (-100).
            keys = F.pad(keys, (0, wp - w, 0, hp - h))
            if sh or sw:
                keys = torch.roll(keys, shifts=(-sh, -sw), dims=(1, 2))
            blocked = ~window_partition(keys[..., None], wh, ww).view(b, bw // b, 1, nt)
            pad_mask = torch.zeros(blocked.shape, device=x.device).masked_fill_(blocked, -100.0)
            mask = pad_mask if mask is None else mask[None] + pad_mask     # (B, nW, N, N)
        elif mask is not None:
            mask = mask[None]
        if mask is not None:
            nw = (hp // wh) * (wp // ww)
            attn = attn.view(b, nw, self.num_heads, nt, nt) + mask[:, :, None].to(attn.dtype)
            attn = attn.view(bw, self.num_heads, nt, nt)
        attn = self.attn_drop(attn.softmax(dim=-1))
        out = (attn @ v).transpose(1, 2).reshape(bw, nt, c)
        out = self.proj_drop(self.proj(out))

        out = window_merge(out, wh, ww, hp, wp, b)
        if sh or sw:
            out = torch.roll(out, shifts=(sh, sw), dims=(1, 2))
        return crop(out, h, w)

    @staticmethod
    def _mask(h, w, hp, wp, wh, ww, sh, sw, device, dynamic=False) -> Optional[torch.Tensor]:
        """``(nW, N, N)`` additive mask (0 / -100, as the official code) or None
        (``dynamic``: symbolic sizes, always a mask, rather than a guard on padding)."""
        if not (dynamic or sh or sw or hp != h or wp != w):
            return None
        rows = _region_ids(h, hp, wh, sh, device)
        cols = _region_ids(w, wp, ww, sw, device)
        # Region label of each position; -1 anywhere along an axis means padding.
        label = rows[:, None] * 3 + cols[None, :]
        label = torch.where((rows[:, None] < 0) | (cols[None, :] < 0),
                            torch.full_like(label, -1), label)
        win = window_partition(label[None, :, :, None], wh, ww).squeeze(-1)  # (nW, N)
        blocked = (win[:, None, :] != win[:, :, None]) | (win[:, None, :] < 0)
        return torch.zeros(blocked.shape, device=device).masked_fill_(blocked, -100.0)


#: attention class of each block type (the contract of :mod:`.attention`)
ATTENTION_TYPES = {INLINE: InLineAttention, SOFTMAX: WindowAttention}


class PatchMerging(nn.Module):
    """2x2 neighbourhood -> one token with twice the channels; odd sides are zero-padded.

    Concatenation order is the official one: (0,0), (1,0), (0,1), (1,1) as (row, col).
    """

    def __init__(self, dim: int, norm_layer: Callable[[int], nn.Module] = nn.LayerNorm):
        super().__init__()
        self.norm = norm_layer(4 * dim)
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)

    @fx_leaf
    def forward(self, x: torch.Tensor, hw: Tuple[int, int]):
        b, _, c = x.shape
        h, w = hw
        x = x.view(b, h, w, c)
        if symbolic(h, w) or h % 2 or w % 2:
            x = F.pad(x, (0, 0, 0, pad_amount(w, 2), 0, pad_amount(h, 2)))
        x = torch.cat([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]], -1)
        hw = (x.shape[1], x.shape[2])
        return self.reduction(self.norm(x.flatten(1, 2))), hw


class SwinStage(BlockStage):
    """Blocks, then (applied by the backbone after the stage output) ``downsample``."""

    def __init__(self, blocks: List[TransformerBlock], downsample: Optional[PatchMerging]):
        super().__init__(blocks)
        self.downsample = downsample

    def forward(self, x: torch.Tensor, hw: Tuple[int, int], valid: ValidMap) -> torch.Tensor:
        return self.run_blocks(x, hw, valid)


class InLineSwin(InLineBackbone):
    """InLine-Swin backbone.

    A Swin Transformer whose 'inline' stages use InLine attention (Han et al.,
    "Bridging the Divide: Reconsidering Softmax and Linear Attention", NeurIPS 2024,
    arXiv 2412.06590) over the whole feature map at every input size, and whose
    'softmax' stages keep Swin's shifted 7x7 windows with relative position bias.
    Any input size works (square or not, not a multiple of 32): the patch embedding
    and patch merging pad, window attention pads, computes and crops.

    Args:
        arch (str): Preset, ``'tiny'``, ``'small'`` or ``'base'`` (the released
            layouts, see ``ARCH_SETTINGS``). The explicit arguments below, when
            given, override the preset. Default: ``'tiny'``.
        embed_dims (int, optional): Channels of stage 0; doubled at each stage.
        depths (Sequence[int], optional): Blocks per stage.
        num_heads (Sequence[int], optional): Heads per stage.
        stage_types (Sequence, optional): Attention per stage: ``'inline'`` or
            ``'softmax'`` for the whole stage, or a sequence with one type per block
            (InLine-Swin-B's stage 3 is ``('inline',) * 2 + ('softmax',) * 16``).
            In a stage, odd-numbered softmax blocks shift their windows.
        in_channels (int): Input channels. Default: 3.
        patch_size (int): Patch embedding stride. Default: 4.
        window_size (int): Window side of softmax blocks. Default: 7.
        mlp_ratio (float): MLP hidden / embedding channels. Default: 4.
        qkv_bias (bool): Bias of the qkv projections. Default: True.
        drop_rate (float): Dropout after projections and in the MLP. Default: 0.
        attn_drop_rate (float): Attention dropout. Default: 0.
        drop_path_rate (float): Stochastic depth, linearly increasing over blocks.
            Default: 0.2.
        out_indices (Sequence[int]): Stages whose outputs are returned, each through
            its own LayerNorm ``norm{i}``. Default: (0, 1, 2, 3).
        frozen_stages (int): Freeze the patch embedding (0) and stages ``< i``
            (with their output norms); -1 freezes nothing. Default: -1.
        with_cp (bool): Gradient checkpointing per block (non-reentrant) while
            training. Default: False.
        pad_aware (bool): Treat the zero padding of a batch as absent: every image
            gets the features it gets alone (see ``InLineBackbone.valid_map``).
            False computes over the whole padded map. Default: True.
        inline_cfg (dict | Sequence, optional): The paper's switches of the InLine
            blocks (``attention``, ``kernel``, ``local_residual``, ``window_size``; see
            ``InLineAttention`` and docs/backbones.md): one dict for every InLine block,
            or one entry (dict or None) per stage. ``window_size`` (InLine-Swin only):
            the InLine blocks attend within non-overlapping windows of that side, no
            shift. None: the released model. Default: None.
        norm_cfg (dict, optional): Every LayerNorm, as mmdet's ``norm_cfg``:
            ``dict(type='LN', eps=...)`` (without ``eps``: 1e-5, the released model's).
            Default: None (the released model).
        act_cfg (dict, optional): The MLPs' activation, e.g. ``dict(type='GELU')``
            (``inline_mm.models.norm_act.ACT_LAYERS``; the InLine local-kernel predictor
            keeps its GELU). Default: None (GELU).
        init_cfg (dict, optional): Pretrained weights, as ``InLineBackbone`` says.
            Default: None.

    Returns (forward ``(x, valid_sizes=None)``; ``valid_sizes``, one ``(h, w)`` per
    image, overrides reading the padding from ``x``):
        tuple[Tensor]: ``(B, C_i, H_i, W_i)`` for each ``i`` in ``out_indices``, zero
        outside each image's region.
    """

    presets = ARCH_SETTINGS
    official_keys = OFFICIAL_KEYS
    block_key = r'layers\.(?P<stage>\d+)\.blocks\.(?P<block>\d+)\.'
    no_weight_decay_keys = ('norm', 'relative_position_bias_table')

    def __init__(self, arch: str = 'tiny', embed_dims: Optional[int] = None,
                 depths: Optional[Sequence[int]] = None,
                 num_heads: Optional[Sequence[int]] = None,
                 stage_types: Optional[Sequence[Union[str, Sequence[str]]]] = None,
                 in_channels: int = 3, patch_size: int = 4, window_size: int = 7,
                 mlp_ratio: float = 4., qkv_bias: bool = True, drop_rate: float = 0.,
                 attn_drop_rate: float = 0., drop_path_rate: float = 0.2,
                 out_indices: Sequence[int] = (0, 1, 2, 3), frozen_stages: int = -1,
                 with_cp: bool = False, pad_aware: bool = True,
                 inline_cfg: Optional[Union[dict, Sequence[Optional[dict]]]] = None,
                 norm_cfg: Optional[dict] = None, act_cfg: Optional[dict] = None,
                 init_cfg: Optional[dict] = None):
        cfg = self.resolve_arch(arch, embed_dims=embed_dims, depths=depths, num_heads=num_heads,
                                stage_types=stage_types)
        embed_dims = cfg['embed_dims']
        depths = cfg['depths']
        num_heads = cfg['num_heads']
        stage_types = cfg['stage_types']
        if len(num_heads) != len(depths):
            raise ValueError(f'num_heads {num_heads} and depths {depths} must have one entry '
                             'per stage')
        dims = [embed_dims * 2 ** i for i in range(len(depths))]
        super().__init__(out_indices, frozen_stages, dims, depths, cfg['arch_name'], in_channels,
                         pad_aware, init_cfg)
        block_types = parse_stage_types(stage_types, depths)
        check_heads(dims, num_heads)
        #: each stage's InLine switches (keys that differ from the released model)
        self.inline_options = parse_inline_cfg(inline_cfg, block_types, type(self).__name__,
                                               window=True)

        norm, act = norm_layer(norm_cfg, 1e-5), act_layer(act_cfg)
        self.patch_embed = PatchEmbed(in_channels, embed_dims, patch_size, norm_layer=norm)
        self.drop_after_pos = nn.Dropout(drop_rate)
        dpr = drop_path_rates(drop_path_rate, depths)
        self.layers = nn.ModuleList()
        for i, depth in enumerate(depths):
            # Odd-numbered softmax blocks of a stage shift their windows.
            blocks = [TransformerBlock(
                dims[i], num_heads[i], t, ATTENTION_TYPES[t], mlp_ratio, qkv_bias, drop_rate,
                attn_drop_rate, dpr[i][j],
                attn_options=dict(window_size=window_size, shift=j % 2 == 1) if t == SOFTMAX
                else self.inline_options[i], norm_layer=norm, act_layer=act)
                for j, t in enumerate(block_types[i])]
            down = PatchMerging(dims[i], norm) if i < len(depths) - 1 else None
            self.layers.append(SwinStage(blocks, down))
        self._finish_init(with_cp, norm_cfg=norm_cfg)

    def _stage_list(self):
        return self.layers        # official key names: layers.{i}.blocks.{j}

    def _stem_modules(self):
        return [self.patch_embed]

    def _convert_official(self, state: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        return convert_swin_checkpoint(state, last_stage=len(self.dims) - 1)

    def _fit_checkpoint(self, state: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """Relative position bias tables of another window size resized to this model's
        (:func:`resize_relative_position_bias_table`), with a log line naming the sizes."""
        own = self.state_dict()
        resized = {}
        for k, v in state.items():
            if k.endswith('relative_position_bias_table') and k in own \
                    and v.shape != own[k].shape and v.shape[1:] == own[k].shape[1:]:
                side = math.isqrt(own[k].shape[0])
                state[k] = resize_relative_position_bias_table(v, side)
                resized.setdefault((math.isqrt(v.shape[0]), side), []).append(k)
        for (src, dst), keys in resized.items():
            print_log(f'{type(self).__name__}: {len(keys)} relative position bias tables of '
                      f'window {(src + 1) // 2} ({src}x{src} offsets) resized to window '
                      f'{(dst + 1) // 2} ({dst}x{dst}), bicubic', logger='current')
        return state

    def forward(self, x: torch.Tensor, valid_sizes=None) -> Tuple[torch.Tensor, ...]:
        x, valid = self.prepare_input(x, valid_sizes)
        x, hw = self.patch_embed(x)
        x = self.drop_after_pos(x)
        valid = valid.scaled(hw, self.patch_embed.patch_size)
        outs = []
        for i, stage in enumerate(self.layers):
            x = stage(x, hw, valid)
            if i in self.out_indices:
                outs.append(self.output(self._output_norm(i), x, hw, valid))
            if stage.downsample is not None:
                # Merged 2x2 cells see zeros past an image.
                x, hw = stage.downsample(valid.zero_own(x), hw)
                valid = valid.scaled(hw, 2)
        return tuple(outs)


def resize_relative_position_bias_table(table: torch.Tensor, side: int) -> torch.Tensor:
    """A ``(S * S, heads)`` relative position bias table -> ``(side * side, heads)``.

    Each head's ``S x S`` grid of offsets (``S = 2 * window - 1``) is resized bicubically
    (``align_corners=False``, computed in fp32), as mmdet's Swin resizes tables on load.
    Returns the table itself when the sizes agree.
    """
    n, heads = table.shape
    src = math.isqrt(n)
    if src * src != n:
        raise ValueError(f'a relative position bias table of {n} rows is no square grid of '
                         'offsets: not a Swin window table')
    if src == side:
        return table
    grid = table.float().t().reshape(1, heads, src, src)
    grid = F.interpolate(grid, size=(side, side), mode='bicubic', align_corners=False)
    return grid.reshape(heads, side * side).t().contiguous().to(table.dtype)


def convert_swin_checkpoint(state: Dict[str, torch.Tensor],
                            last_stage: int = 3) -> Dict[str, torch.Tensor]:
    """Official InLine-Swin state dict -> :class:`InLineSwin` keys (pure, idempotent).

    The official final ``norm`` becomes the last output norm; the classifier and
    the non-persistent buffers (``attn_mask``, ``relative_position_index``) go.
    """
    out = OrderedDict()
    for k, v in state.items():
        if k.startswith('head.') or k.endswith(('attn_mask', 'relative_position_index')):
            continue
        if k.startswith('norm.'):
            k = f'norm{last_stage}.' + k[len('norm.'):]
        out[k] = v
    return out
