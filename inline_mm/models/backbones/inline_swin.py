"""InLine-Swin: Swin Transformer whose InLine stages attend globally at linear cost."""
from collections import OrderedDict
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint as cp
from timm.layers import DropPath, Mlp, trunc_normal_

from ...checkpoint import check_layout
from ...registry import register_backbone
from ..inline_attention import InLineAttention
from .base import INLINE, InLineBackbone, parse_stage_types, resolve_arch, to_nchw

__all__ = ['InLineSwin', 'WindowAttention', 'convert_swin_checkpoint']


def _b_stage3(depth=18, inline_blocks=2):
    return (INLINE,) * inline_blocks + ('softmax',) * (depth - inline_blocks)


ARCH_SETTINGS = {
    'tiny': dict(embed_dims=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24),
                 stage_types=('inline', 'inline', 'inline', 'softmax')),
    'small': dict(embed_dims=96, depths=(2, 2, 18, 2), num_heads=(3, 6, 12, 24),
                  stage_types=('inline', 'inline', 'softmax', 'softmax')),
    'base': dict(embed_dims=128, depths=(2, 2, 18, 2), num_heads=(4, 8, 16, 32),
                 stage_types=('inline', 'inline', _b_stage3(), 'softmax')),
}


def _window_partition(x: torch.Tensor, wh: int, ww: int) -> torch.Tensor:
    """``(B, H, W, C)`` -> ``(B * nW, wh * ww, C)``."""
    b, h, w, c = x.shape
    x = x.view(b, h // wh, wh, w // ww, ww, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, wh * ww, c)


def _window_merge(x: torch.Tensor, wh: int, ww: int, h: int, w: int) -> torch.Tensor:
    """Inverse of :func:`_window_partition`."""
    c = x.shape[-1]
    x = x.view(-1, h // wh, w // ww, wh, ww, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, h, w, c)


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
    valid = torch.roll(valid, -shift) if shift else valid
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
        qkv_bias (bool): Default: True.
        attn_drop (float): Dropout on attention weights. Default: 0.
        proj_drop (float): Dropout after the projection. Default: 0.
    """

    def __init__(self, dim: int, num_heads: int, window_size: int = 7, qkv_bias: bool = True,
                 attn_drop: float = 0., proj_drop: float = 0.):
        super().__init__()
        if dim % num_heads:
            raise ValueError(f'dim ({dim}) must be divisible by num_heads ({num_heads})')
        self.dim, self.num_heads, self.window_size = dim, num_heads, window_size
        self.scale = (dim // num_heads) ** -0.5
        self.relative_position_bias_table = nn.Parameter(
            torch.zeros((2 * window_size - 1) ** 2, num_heads))
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)
        trunc_normal_(self.relative_position_bias_table, std=.02)

    def extra_repr(self) -> str:
        return f'dim={self.dim}, num_heads={self.num_heads}, window_size={self.window_size}'

    def _relative_bias(self, wh: int, ww: int) -> torch.Tensor:
        ws = self.window_size
        dev = self.relative_position_bias_table.device
        ys, xs = torch.meshgrid(torch.arange(wh, device=dev), torch.arange(ww, device=dev),
                                indexing='ij')
        ys, xs = ys.flatten(), xs.flatten()
        index = (ys[:, None] - ys[None, :] + ws - 1) * (2 * ws - 1) + (xs[:, None] - xs[None, :] + ws - 1)
        bias = self.relative_position_bias_table[index.flatten()]
        return bias.view(wh * ww, wh * ww, -1).permute(2, 0, 1)          # (heads, N, N)

    def forward(self, x: torch.Tensor, hw: Tuple[int, int], shifted: bool) -> torch.Tensor:
        """``x``: ``(B, H*W, C)``; ``shifted``: whether this block shifts its windows."""
        b, n, c = x.shape
        h, w = hw
        ws = self.window_size
        wh, ww = min(ws, h), min(ws, w)
        sh = ws // 2 if shifted and h > ws else 0
        sw = ws // 2 if shifted and w > ws else 0
        hp, wp = -(-h // wh) * wh, -(-w // ww) * ww

        x = x.view(b, h, w, c)
        if hp != h or wp != w:
            x = F.pad(x, (0, 0, 0, wp - w, 0, hp - h))
        if sh or sw:
            x = torch.roll(x, shifts=(-sh, -sw), dims=(1, 2))
        windows = _window_partition(x, wh, ww)                           # (B*nW, N, C)

        bw, nt, _ = windows.shape
        qkv = self.qkv(windows).reshape(bw, nt, 3, self.num_heads, c // self.num_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        attn = attn + self._relative_bias(wh, ww).unsqueeze(0).to(attn.dtype)
        mask = self._mask(h, w, hp, wp, wh, ww, sh, sw, x.device)
        if mask is not None:
            nw = mask.shape[0]
            attn = attn.view(bw // nw, nw, self.num_heads, nt, nt) + mask[None, :, None].to(attn.dtype)
            attn = attn.view(bw, self.num_heads, nt, nt)
        attn = self.attn_drop(attn.softmax(dim=-1))
        out = (attn @ v).transpose(1, 2).reshape(bw, nt, c)
        out = self.proj_drop(self.proj(out))

        out = _window_merge(out, wh, ww, hp, wp)
        if sh or sw:
            out = torch.roll(out, shifts=(sh, sw), dims=(1, 2))
        return out[:, :h, :w].reshape(b, n, c)

    @staticmethod
    def _mask(h, w, hp, wp, wh, ww, sh, sw, device) -> Optional[torch.Tensor]:
        """``(nW, N, N)`` additive mask (0 / -100, as the official code) or None."""
        if not (sh or sw or hp != h or wp != w):
            return None
        rows = _region_ids(h, hp, wh, sh, device)
        cols = _region_ids(w, wp, ww, sw, device)
        # Region label of each position; -1 anywhere along an axis means padding.
        label = rows[:, None] * 3 + cols[None, :]
        label = torch.where((rows[:, None] < 0) | (cols[None, :] < 0),
                            torch.full_like(label, -1), label)
        win = _window_partition(label[None, :, :, None], wh, ww).squeeze(-1)  # (nW, N)
        blocked = (win[:, None, :] != win[:, :, None]) | (win[:, None, :] < 0)
        return torch.zeros(blocked.shape, device=device).masked_fill_(blocked, -100.0)


class SwinBlock(nn.Module):
    """Pre-norm transformer block with InLine (global) or window softmax attention."""

    def __init__(self, dim: int, num_heads: int, attn_type: str, shifted: bool, window_size: int,
                 mlp_ratio: float, qkv_bias: bool, drop: float, attn_drop: float, drop_path: float):
        super().__init__()
        self.attn_type = attn_type
        self.shifted = shifted
        self.norm1 = nn.LayerNorm(dim)
        if attn_type == INLINE:
            self.attn = InLineAttention(dim, num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop,
                                        proj_drop=drop)
        else:
            self.attn = WindowAttention(dim, num_heads, window_size, qkv_bias=qkv_bias,
                                        attn_drop=attn_drop, proj_drop=drop)
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), act_layer=nn.GELU, drop=drop)

    def forward(self, x: torch.Tensor, hw: Tuple[int, int]) -> torch.Tensor:
        y = self.norm1(x)
        y = self.attn(y, hw) if self.attn_type == INLINE else self.attn(y, hw, self.shifted)
        x = x + self.drop_path(y)
        return x + self.drop_path(self.mlp(self.norm2(x)))


class PatchMerging(nn.Module):
    """2x2 neighbourhood -> one token with twice the channels; odd sides are zero-padded.

    Concatenation order is the official one: (0,0), (1,0), (0,1), (1,1) as (row, col).
    """

    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(4 * dim)
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)

    def forward(self, x: torch.Tensor, hw: Tuple[int, int]):
        b, _, c = x.shape
        h, w = hw
        x = x.view(b, h, w, c)
        if h % 2 or w % 2:
            x = F.pad(x, (0, 0, 0, w % 2, 0, h % 2))
        x = torch.cat([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]], -1)
        hw = (x.shape[1], x.shape[2])
        return self.reduction(self.norm(x.flatten(1, 2))), hw


class PatchEmbed(nn.Module):
    """Non-overlapping ``patch x patch`` conv + LayerNorm; pads the image to the patch."""

    def __init__(self, in_channels: int, dim: int, patch_size: int = 4):
        super().__init__()
        self.patch_size = patch_size
        self.proj = nn.Conv2d(in_channels, dim, patch_size, patch_size)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor):
        p = self.patch_size
        h, w = x.shape[-2:]
        if h % p or w % p:
            x = F.pad(x, (0, -w % p, 0, -h % p))
        x = self.proj(x)
        hw = (x.shape[2], x.shape[3])
        return self.norm(x.flatten(2).transpose(1, 2)), hw


class SwinStage(nn.Module):
    def __init__(self, blocks: List[SwinBlock], downsample: Optional[PatchMerging]):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.downsample = downsample
        self.with_cp = False

    def forward(self, x, hw):
        for blk in self.blocks:
            if self.with_cp and x.requires_grad:
                x = cp.checkpoint(blk, x, hw, use_reentrant=False)
            else:
                x = blk(x, hw)
        return x


@register_backbone
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
        init_cfg (dict, optional): ``dict(type='Pretrained', checkpoint=PATH)`` loads
            an official ImageNet file, a state dict, an OpenMMLab checkpoint or a
            converted ``.safetensors``; extra keys: ``allow_pickle`` (bool, trust the
            file), ``checkpoint_key`` (e.g. ``'state_dict_ema'``), ``min_match``
            (fraction of tensors that must be found, default 0.9). Default: None.

    Returns (forward):
        tuple[Tensor]: ``(B, C_i, H_i, W_i)`` for each ``i`` in ``out_indices``.
    """

    def __init__(self, arch: str = 'tiny', embed_dims: Optional[int] = None,
                 depths: Optional[Sequence[int]] = None,
                 num_heads: Optional[Sequence[int]] = None,
                 stage_types: Optional[Sequence[Union[str, Sequence[str]]]] = None,
                 in_channels: int = 3, patch_size: int = 4, window_size: int = 7,
                 mlp_ratio: float = 4., qkv_bias: bool = True, drop_rate: float = 0.,
                 attn_drop_rate: float = 0., drop_path_rate: float = 0.2,
                 out_indices: Sequence[int] = (0, 1, 2, 3), frozen_stages: int = -1,
                 with_cp: bool = False, init_cfg: Optional[dict] = None):
        cfg = resolve_arch('InLineSwin', ARCH_SETTINGS, arch, embed_dims=embed_dims, depths=depths,
                           num_heads=num_heads, stage_types=stage_types)
        embed_dims = cfg['embed_dims']
        depths = cfg['depths']
        num_heads = cfg['num_heads']
        stage_types = cfg['stage_types']
        if len(num_heads) != len(depths):
            raise ValueError(f'num_heads {num_heads} and depths {depths} must have one entry '
                             'per stage')
        super().__init__(out_indices, frozen_stages, len(depths), init_cfg=init_cfg)
        self.arch_name = cfg['arch_name']
        block_types = parse_stage_types(stage_types, depths)
        dims = [embed_dims * 2 ** i for i in range(len(depths))]
        for i, (d, h) in enumerate(zip(dims, num_heads)):
            if d % h:
                raise ValueError(f'stage {i}: {d} channels are not divisible by {h} heads')
        self.dims = dims
        self.depths = depths
        self.in_channels = in_channels

        self.patch_embed = PatchEmbed(in_channels, embed_dims, patch_size)
        self.drop_after_pos = nn.Dropout(drop_rate)
        dpr = torch.linspace(0, drop_path_rate, sum(depths)).tolist()
        self.layers = nn.ModuleList()
        for i, depth in enumerate(depths):
            start = sum(depths[:i])
            blocks = [SwinBlock(dims[i], num_heads[i], block_types[i][j], shifted=j % 2 == 1,
                                window_size=window_size, mlp_ratio=mlp_ratio, qkv_bias=qkv_bias,
                                drop=drop_rate, attn_drop=attn_drop_rate,
                                drop_path=dpr[start + j])
                      for j in range(depth)]
            down = PatchMerging(dims[i]) if i < len(depths) - 1 else None
            self.layers.append(SwinStage(blocks, down))
        self._add_output_norms(dims)
        self.with_cp = with_cp
        self._freeze_stages()

    def _stage_list(self):
        return self.layers        # official key names: layers.{i}.blocks.{j}

    def _stem_modules(self):
        return [self.patch_embed]

    def convert_checkpoint(self, state: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        state = convert_swin_checkpoint(state, last_stage=len(self.dims) - 1)
        check_layout(self, state, ARCH_SETTINGS, block_key=r'layers\.(\d+)\.blocks\.(\d+)\.')
        return state

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        self.check_input(x)
        x, hw = self.patch_embed(x)
        x = self.drop_after_pos(x)
        outs = []
        for i, stage in enumerate(self.layers):
            x = stage(x, hw)
            if i in self.out_indices:
                outs.append(to_nchw(getattr(self, f'norm{i}')(x), hw))
            if stage.downsample is not None:
                x, hw = stage.downsample(x, hw)
        return tuple(outs)


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
