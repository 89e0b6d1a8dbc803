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
from .base import InLineBackbone, check_heads, parse_stage_types
from .families import Variant, official_url, register_family
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


def _relative_index(window: int, wh: int, ww: int, device=None) -> torch.Tensor:
    """``(wh * ww, wh * ww)`` index into a ``(2 window - 1) ** 2`` relative-position table
    for the tokens of a ``wh x ww`` window (``wh, ww <= window``)."""
    ys, xs = torch.meshgrid(torch.arange(wh, device=device), torch.arange(ww, device=device),
                            indexing='ij')
    ys, xs = ys.flatten(), xs.flatten()
    return (ys[:, None] - ys[None, :] + window - 1) * (2 * window - 1) \
        + (xs[:, None] - xs[None, :] + window - 1)


def _shifted_axis(side: torch.Tensor, length: int, window: int, shift: bool):
    """One axis of Swin's shifted windows for images of ``side`` ``(B, 1)`` on a map axis
    of ``length`` (a multiple of ``window``), each image as alone: padded to ``hp`` (a
    multiple of the window; its own side when it fits in one window, then unshifted),
    rolled by ``-s`` within ``hp`` (``s = window // 2`` where shifted).

    Returns ``(B, length)`` tensors over the positions ``p`` of the shifted frame: the
    source position ``src`` (the roll as a gather), its inverse ``dst``, Swin's region
    label (0, 1, 2: the parts the roll brought together) and whether ``src`` is inside
    the image. Positions past ``hp`` map to themselves, outside the image.
    """
    p = torch.arange(length, device=side.device)[None, :]
    wide = side > window
    hp = torch.where(wide, torch.div(side + window - 1, window, rounding_mode='floor') * window,
                     side)
    s = torch.where(wide, window // 2, 0) if shift else torch.zeros_like(side)
    inside_frame = p < hp
    src = torch.where(inside_frame, torch.remainder(p + s, hp), p)
    dst = torch.where(inside_frame, torch.remainder(p - s, hp), p)
    label = (p >= hp - window).long() + (p >= hp - s).long() if shift \
        else torch.zeros_like(p).expand_as(src)
    return src, dst, label, src < side


class WindowAttention(nn.Module):
    """Swin (shifted) window softmax attention with relative position bias, on
    ``scaled_dot_product_attention``.

    Windows and shifts are derived from the run-time map size: a map side that fits
    in one window uses a window of exactly that side, unpadded and unshifted (the
    official behaviour at 224: the 7x7 last stage is neither padded nor shifted).
    Other sides are padded to a multiple of the window; padded positions are masked
    out as keys, so padding never changes the result of real tokens. In a padded batch
    each image gets the windows and shift it would get alone, as fixed-shape tensor
    operations: the roll as a per-image gather and a per-image additive mask (made once
    per stage; no loop over the images).

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

    #: the additive mask value of blocked keys (the official code's; a boolean mask would
    #: give NaN rows for windows wholly outside an image)
    BLOCKED = -100.0

    def __init__(self, dim: int, num_heads: int, window_size: int = 7, shift: bool = False,
                 qkv_bias: bool = True, attn_drop: float = 0., proj_drop: float = 0.):
        super().__init__()
        if dim % num_heads:
            raise ValueError(f'dim ({dim}) must be divisible by num_heads ({num_heads})')
        self.dim, self.num_heads, self.window_size = dim, num_heads, window_size
        self.shift = shift
        self.scale = (dim // num_heads) ** -0.5     # SDPA's default, kept for readers
        self.relative_position_bias_table = nn.Parameter(
            torch.zeros((2 * window_size - 1) ** 2, num_heads))
        # Not in the state dict (the converter drops the official one): made from the size.
        self.register_buffer('relative_position_index',
                             _relative_index(window_size, window_size, window_size),
                             persistent=False)
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)
        trunc_normal_(self.relative_position_bias_table, std=.02)
        self._masks: Dict[tuple, torch.Tensor] = {}

    def extra_repr(self) -> str:
        return (f'dim={self.dim}, num_heads={self.num_heads}, window_size={self.window_size}, '
                f'shift={self.shift}')

    def _relative_bias(self, wh: int, ww: int) -> torch.Tensor:
        """``(heads, N, N)`` relative position bias of a ``wh x ww`` window."""
        ws = self.window_size
        table = self.relative_position_bias_table
        if not symbolic(wh, ww) and (wh, ww) == (ws, ws):
            index = self.relative_position_index
        else:
            index = _relative_index(ws, wh, ww, table.device)
        n = wh * ww
        return table[index.flatten()].view(n, n, -1).permute(2, 0, 1)

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
        the windows and shift it would get alone and keys outside it are masked."""
        b, n, c = x.shape
        h, w = hw
        wh, ww, sh, sw = self.layout(hw)
        # A side within its window is one window of it (round_up would be the same, but
        # with symbolic sizes only this form is known to be h without a guard).
        hp = h if h <= wh else round_up(h, wh)
        wp = w if w <= ww else round_up(w, ww)
        x = valid.zero(x).view(b, h, w, c)
        if symbolic(h, w) or hp != h or wp != w:
            x = F.pad(x, (0, 0, 0, wp - w, 0, hp - h))
        if valid.is_padded:
            rows, cols, mask = self._image_layouts(valid, (hp, wp), (wh, ww), (sh > 0, sw > 0))
            if rows is not None:
                x = x[torch.arange(b, device=x.device)[:, None, None], rows[0][:, :, None],
                      cols[0][:, None, :]]
        else:
            rows = cols = None
            if sh or sw:
                x = torch.roll(x, shifts=(-sh, -sw), dims=(1, 2))
            mask = self._map_mask(h, w, hp, wp, wh, ww, sh, sw, x.device)
        out = self._attend(window_partition(x, wh, ww), b, (wh, ww), mask)
        out = window_merge(out, wh, ww, hp, wp, b)
        if rows is not None:
            out = out[torch.arange(b, device=x.device)[:, None, None], rows[1][:, :, None],
                      cols[1][:, None, :]]
        elif sh or sw:
            out = torch.roll(out, shifts=(sh, sw), dims=(1, 2))
        return crop(out, h, w).reshape(b, n, c)

    def _attend(self, windows: torch.Tensor, b: int, window: Tuple[int, int],
                mask: Optional[torch.Tensor]) -> torch.Tensor:
        """``(B * nW, N, C)`` windows -> attention outputs after the projection; ``mask``:
        additive ``(nW, N, N)`` or ``(B, nW, N, N)``, or None."""
        bw, nt, c = windows.shape
        heads = self.num_heads
        qkv = self.qkv(windows).view(b, bw // b, nt, 3, heads, c // heads)
        q, k, v = qkv.permute(3, 0, 1, 4, 2, 5).unbind(0)                # (B, nW, heads, N, d)
        bias = self._relative_bias(*window)
        attn_mask = bias if mask is None else bias + mask.unsqueeze(-3)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask.to(q.dtype),
            dropout_p=self.attn_drop.p if self.training else 0.)
        out = out.transpose(2, 3).reshape(bw, nt, c)
        return self.proj_drop(self.proj(out))

    def _blocked(self, label: torch.Tensor, inside: torch.Tensor,
                 window: Tuple[int, int]) -> torch.Tensor:
        """``(B, Hp, Wp)`` region labels and key validity -> ``(B, nW, N, N)`` additive
        mask: a key is blocked outside the image or in another region than the query."""
        b = label.shape[0]
        win = window_partition(label[..., None], *window).view(b, -1, window[0] * window[1])
        keys = window_partition(inside[..., None], *window).view(b, -1, window[0] * window[1])
        blocked = (win[..., None, :] != win[..., :, None]) | ~keys[..., None, :]
        return torch.zeros(blocked.shape, device=label.device).masked_fill_(blocked,
                                                                            self.BLOCKED)

    def _image_layouts(self, valid: ValidMap, padded: Tuple[int, int],
                       window: Tuple[int, int], shift: Tuple[bool, bool]):
        """Per-image gathers ``((src, dst) rows, (src, dst) cols)`` (None when no image
        is shifted) and the ``(B, nW, N, N)`` mask of a padded batch, made once per map
        for the blocks of a stage that share this layout. ``shift``: whether the map's
        layout shifts each axis (an axis that fits in one window is unshifted, and that
        window, for every image)."""
        key = ('swin', self.window_size, shift)

        def make():
            sizes = valid.size_tensor
            axes = [_shifted_axis(sizes[:, i:i + 1], padded[i], window[i], shift[i])
                    for i in range(2)]
            (rs, rd, rl, ri), (cs, cd, cl, ci) = axes
            label = rl[:, :, None] * 3 + cl[:, None, :]
            inside = ri[:, :, None] & ci[:, None, :]
            return (rs, rd), (cs, cd), self._blocked(label, inside, window)

        rows, cols, mask = valid.memo(key, make)
        return (rows, cols, mask) if any(shift) else (None, None, mask)

    def _map_mask(self, h, w, hp, wp, wh, ww, sh, sw, device) -> Optional[torch.Tensor]:
        """``(nW, N, N)`` additive mask of an unpadded batch (shift regions, the map's own
        padding to whole windows) or None; cached per layout in eager mode. With symbolic
        sizes (torch.compile) always a mask, rather than a guard on padding."""
        dynamic = symbolic(h, w)
        if not (dynamic or sh or sw or hp != h or wp != w):
            return None
        key = (h, w, wh, ww, sh, sw, device)
        if not dynamic and key in self._masks:
            return self._masks[key]
        # The map as one image: its sides counted from aranges (sizes may be symbolic).
        side = [(torch.arange(n, device=device) < s).sum().view(1, 1) for n, s in
                ((hp, h), (wp, w))]
        (_, _, rl, ri), (_, _, cl, ci) = (
            _shifted_axis(side[0], hp, wh, bool(sh)), _shifted_axis(side[1], wp, ww, bool(sw)))
        mask = self._blocked(rl[:, :, None] * 3 + cl[:, None, :], ri[:, :, None] & ci[:, None, :],
                             (wh, ww))[0]
        if not dynamic:
            self._masks[key] = mask
        return mask


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
        patch_size (int): Patch embedding stride. Default: 4.
        window_size (int): Window side of softmax blocks. Default: 7.
        mlp_ratio (float): MLP hidden / embedding channels. Default: 4.
        **kwargs: What every InLine backbone takes (``InLineBackbone``): ``out_indices``
            (default: every stage), ``frozen_stages`` (0 freezes the patch embedding),
            ``with_cp``, ``drop_path_rate`` (default 0.2), ``impl``, ``pad_aware``,
            ``inline_cfg`` (here with ``window_size``: InLine blocks within windows of that
            side, no shift), ``norm_cfg`` (eps 1e-5 without one), ``init_cfg``, ...
    """

    official_keys = OFFICIAL_KEYS
    block_key = r'layers\.(?P<stage>\d+)\.blocks\.(?P<block>\d+)\.'
    no_weight_decay_keys = ('norm', 'relative_position_bias_table')

    def __init__(self, arch: str = 'tiny', embed_dims: Optional[int] = None,
                 depths: Optional[Sequence[int]] = None,
                 num_heads: Optional[Sequence[int]] = None,
                 stage_types: Optional[Sequence[Union[str, Sequence[str]]]] = None,
                 patch_size: int = 4, window_size: int = 7, mlp_ratio: float = 4., **kwargs):
        cfg = self.resolve_arch(arch, embed_dims=embed_dims, depths=depths, num_heads=num_heads,
                                stage_types=stage_types)
        embed_dims, depths, num_heads = cfg['embed_dims'], cfg['depths'], cfg['num_heads']
        if len(num_heads) != len(depths):
            raise ValueError(f'num_heads {num_heads} and depths {depths} must have one entry '
                             'per stage')
        dims = [embed_dims * 2 ** i for i in range(len(depths))]
        super().__init__(dims, depths, cfg['arch_name'], **kwargs)
        block_types = parse_stage_types(cfg['stage_types'], depths)
        check_heads(dims, num_heads)
        self.parse_inline_cfg(block_types, window=True)

        norm, act = norm_layer(self.norm_cfg, 1e-5), act_layer(self.act_cfg)
        self.patch_embed = PatchEmbed(self.in_channels, embed_dims, patch_size, norm_layer=norm)
        self.drop_after_pos = nn.Dropout(self.drop_rate)
        dpr = drop_path_rates(self.drop_path_rate, depths)
        self.layers = nn.ModuleList()
        for i, depth in enumerate(depths):
            # Odd-numbered softmax blocks of a stage shift their windows.
            blocks = [TransformerBlock(
                dims[i], num_heads[i], t, ATTENTION_TYPES[t], mlp_ratio, self.qkv_bias,
                self.drop_rate, self.attn_drop_rate, dpr[i][j],
                attn_options=dict(window_size=window_size, shift=j % 2 == 1) if t == SOFTMAX
                else self.inline_options[i], norm_layer=norm, act_layer=act)
                for j, t in enumerate(block_types[i])]
            down = PatchMerging(dims[i], norm) if i < len(depths) - 1 else None
            self.layers.append(SwinStage(blocks, down))
        self._finish_init()

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


# ------------------------------------------------------------------ the family and its variants
def _b_stage3(depth=18, inline_blocks=2):
    return (INLINE,) * inline_blocks + (SOFTMAX,) * (depth - inline_blocks)


register_family(
    InLineSwin, convert=convert_swin_checkpoint, strides=(4, 8, 16, 32),
    first_conv='patch_embed.proj',
    smoke=dict(embed_dims=16, depths=(1, 2, 2, 2), num_heads=(1, 2, 4, 8),
               stage_types=('inline', 'softmax', ('inline', 'softmax'), 'softmax'),
               drop_path_rate=0.),
    variants=[
        Variant('tiny', dict(embed_dims=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24),
                             stage_types=('inline', 'inline', 'inline', 'softmax')),
                weights='swin_t', url=official_url('32810869fcc34410966b')),
        Variant('small', dict(embed_dims=96, depths=(2, 2, 18, 2), num_heads=(3, 6, 12, 24),
                              stage_types=('inline', 'inline', 'softmax', 'softmax')),
                weights='swin_s', url=official_url('e9657fd247c04c7cb1a1')),
        Variant('base', dict(embed_dims=128, depths=(2, 2, 18, 2), num_heads=(4, 8, 16, 32),
                             stage_types=('inline', 'inline', _b_stage3(), 'softmax')),
                weights='swin_b', url=official_url('bf23564bb64c420aafe1')),
    ])
#: the presets by arch (declared by the variants above)
ARCH_SETTINGS = InLineSwin.presets
