"""InLine-PVT: Pyramid Vision Transformer whose blocks use global InLine attention.

The family's presets, official-key pattern and converter live here, next to the model.
"""
import re
from collections import OrderedDict
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.layers import trunc_normal_

from .attention import INLINE, SOFTMAX, InLineAttention
from .base import InLineBackbone, check_heads, parse_stage_types
from .families import Variant, official_url, register_family
from .layers import (BlockStage, PatchEmbed, TransformerBlock, drop_path_rates, symbolic,
                     to_nchw)
from .norm_act import act_layer, norm_layer
from .padding import NO_PADDING, ValidMap
from .tracing import fx_leaf

__all__ = ['InLinePVT', 'PositionEmbedding', 'SpatialReductionAttention',
           'convert_pvt_checkpoint', 'ARCH_SETTINGS', 'OFFICIAL_KEYS']

#: official (``block1.``, ``pos_embed1``) and converted (``stages.0.blocks.``) InLine-PVT
#: state dicts, and no other family's, have such keys
OFFICIAL_KEYS = (r'^(block1\.|pos_embed1|stages\.0\.blocks\.)', r'pos_embed')

#: LayerNorm eps of the blocks (and of our output norms); patch embeddings use 1e-5.
BLOCK_NORM_EPS = 1e-6


class PositionEmbedding(nn.Module):
    """Absolute position table stored at the pretraining grid, resized on the fly.

    The table is kept at its pretraining size (56x56, 28x28, 14x14, 7x7 for 224
    input) so that official weights load unchanged; at any other map size it is
    resized with ``F.interpolate(mode='bilinear', align_corners=False)``, which is
    what the official model does at run time.

    Args:
        dim (int): Channels.
        grid (tuple[int, int]): Stored ``(H, W)`` grid.
    """

    def __init__(self, dim: int, grid: Tuple[int, int]):
        super().__init__()
        self.grid = tuple(grid)
        self.weight = nn.Parameter(torch.zeros(1, self.grid[0] * self.grid[1], dim))
        trunc_normal_(self.weight, std=.02)

    def extra_repr(self) -> str:
        return f'dim={self.weight.shape[-1]}, grid={self.grid}'

    def table(self, hw: Tuple[int, int]) -> torch.Tensor:
        """The table at map size ``hw``: ``(1, H * W, C)``."""
        pos = self.weight
        if tuple(hw) != self.grid:
            gh, gw = self.grid
            pos = pos.reshape(1, gh, gw, -1).permute(0, 3, 1, 2)
            pos = F.interpolate(pos, size=tuple(hw), mode='bilinear', align_corners=False)
            pos = pos.flatten(2).transpose(1, 2)
        return pos

    @fx_leaf
    def forward(self, x: torch.Tensor, hw: Tuple[int, int],
                valid: ValidMap = NO_PADDING) -> torch.Tensor:
        """``x + table``; each image of ``valid`` gets the table resized to its own
        region (as alone), zero outside it."""
        if not valid.is_padded:
            return x + self.table(hw)
        gh, gw = self.grid
        return x + valid.table(self.weight.reshape(1, gh, gw, -1).permute(0, 3, 1, 2), hw)


class SpatialReductionAttention(nn.Module):
    """PVT v1 softmax attention; keys and values come from a map reduced ``sr_ratio``x.

    Parameter names are the official ones (``q``, ``kv``, ``sr``, ``norm``,
    ``proj``). The reduction is a strided convolution without padding, so on sides
    that are not a multiple of ``sr_ratio`` the last partial cells give no keys (as
    in mmdet's PVT).

    Args:
        dim (int): Channels.
        num_heads (int): Heads.
        sr_ratio (int): Spatial reduction of keys/values; 1 for none. Default: 1.
        qkv_bias (bool): Default: True.
        attn_drop (float): Dropout on attention weights. Default: 0.
        proj_drop (float): Dropout after the projection. Default: 0.
        norm_layer (callable): Builds the reduction's norm from the channels.
            Default: ``nn.LayerNorm``.
    """

    def __init__(self, dim: int, num_heads: int, sr_ratio: int = 1, qkv_bias: bool = True,
                 attn_drop: float = 0., proj_drop: float = 0.,
                 norm_layer: Callable[[int], nn.Module] = nn.LayerNorm):
        super().__init__()
        if dim % num_heads:
            raise ValueError(f'dim ({dim}) must be divisible by num_heads ({num_heads})')
        self.dim, self.num_heads, self.sr_ratio = dim, num_heads, sr_ratio
        self.q = nn.Linear(dim, dim, bias=qkv_bias)
        self.kv = nn.Linear(dim, dim * 2, bias=qkv_bias)
        self.attn_drop = attn_drop
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)
        if sr_ratio > 1:
            self.sr = nn.Conv2d(dim, dim, kernel_size=sr_ratio, stride=sr_ratio)
            self.norm = norm_layer(dim)

    def extra_repr(self) -> str:
        return f'dim={self.dim}, num_heads={self.num_heads}, sr_ratio={self.sr_ratio}'

    def forward(self, x: torch.Tensor, hw: Tuple[int, int],
                token_mean: Optional[torch.Tensor] = None,
                valid: ValidMap = NO_PADDING) -> torch.Tensor:
        """The call of :mod:`.attention` (``token_mean`` is not used). Keys come only
        from reduction cells inside an image (the ``floor(h / sr_ratio)`` x
        ``floor(w / sr_ratio)`` cells it would have alone)."""
        b, n, c = x.shape
        heads, d = self.num_heads, c // self.num_heads
        x = valid.zero(x)
        mask = valid.pooled(self.sr_ratio).key_mask()
        q = self.q(x).view(b, n, heads, d).transpose(1, 2)
        if symbolic(n):
            # Under torch.compile q is a saved tensor of the training graph; as a view with
            # symbolic strides Inductor has failed to order them ("cannot determine
            # truth value of Relational: 16*((s0 + 3)//4)*((s1 + 3)//4) < 1"): a copy.
            q = q.clone(memory_format=torch.contiguous_format)
        if self.sr_ratio > 1:
            x = self.norm(self.sr(to_nchw(x, hw)).flatten(2).transpose(1, 2))
        k, v = self.kv(x).view(b, -1, 2, heads, d).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=self.attn_drop if self.training else 0.)
        out = out.transpose(1, 2).reshape(b, n, c)
        return self.proj_drop(self.proj(out))


#: attention class of each block type (the contract of :mod:`.attention`)
ATTENTION_TYPES = {INLINE: InLineAttention, SOFTMAX: SpatialReductionAttention}


class PVTStage(BlockStage):
    """Patch embedding (stride 4 or 2, padded), position embedding, blocks."""

    def __init__(self, patch_embed: PatchEmbed, pos_embed: PositionEmbedding, drop: float,
                 blocks: List[TransformerBlock]):
        super().__init__(blocks)
        self.patch_embed = patch_embed
        self.pos_embed = pos_embed
        self.pos_drop = nn.Dropout(drop)

    def forward(self, x: torch.Tensor, valid: ValidMap):
        """``(B, C_in, H, W)`` (zero outside the images of ``valid``) ->
        ``(B, H' * W', C)`` tokens, ``(H', W')`` and the images' regions there."""
        x, hw = self.patch_embed(x)
        valid = valid.scaled(hw, self.patch_embed.patch_size)
        x = self.pos_drop(self.pos_embed(x, hw, valid))
        return self.run_blocks(x, hw, valid), hw, valid


class InLinePVT(InLineBackbone):
    """InLine-PVT backbone.

    The Pyramid Vision Transformer (v1) of Han et al., "Bridging the Divide:
    Reconsidering Softmax and Linear Attention", NeurIPS 2024 (arXiv 2412.06590):
    every block uses InLine attention over the whole feature map, without the
    spatial reduction of PVT's softmax attention (the released models were
    trained so, ``la_sr_ratios='1111'``), at linear cost in the number of pixels.
    Stages may instead be set to ``'softmax'`` (PVT v1 spatial-reduction
    attention with ``sr_ratios``) for mixed layouts; the released weights are
    all-InLine. Any input of at least 32x32 works, square or not: the patch
    embeddings pad to their stride, and the position embeddings, stored at the
    224-pixel pretraining grid, are resized bilinearly to the map at every forward.

    Args:
        arch (str): Preset, ``'tiny'``, ``'small'``, ``'medium'`` or ``'large'`` (the
            released layouts, see ``ARCH_SETTINGS``). The explicit arguments below,
            when given, override the preset. Default: ``'tiny'``.
        embed_dims (Sequence[int], optional): Channels per stage.
        depths (Sequence[int], optional): Blocks per stage.
        num_heads (Sequence[int], optional): Heads per stage.
        mlp_ratios (Sequence[float], optional): MLP hidden / embedding channels per
            stage.
        stage_types (Sequence, optional): Attention per stage: ``'inline'`` or
            ``'softmax'`` for the whole stage, or a sequence with one type per block.
        sr_ratios (Sequence[int]): Key/value spatial reduction of softmax blocks per
            stage (InLine blocks never reduce). Default: (8, 4, 2, 1).
        patch_size (int): Stride of the first patch embedding (later ones: 2).
            Default: 4.
        pretrain_img_size (int): Image side the position tables were trained at;
            sets their stored grids (``pretrain_img_size // (patch_size * 2**i)``).
            Default: 224.
        **kwargs: What every InLine backbone takes (``InLineBackbone``): ``out_indices``
            (default: every stage; output norms eps 1e-6, all fresh: the official model
            has no final norm), ``frozen_stages`` (0 freezes the first patch and position
            embeddings), ``with_cp``, ``drop_path_rate`` (default 0.1), ``impl``,
            ``pad_aware`` (position tables resized to each image's own map), ``inline_cfg``,
            ``norm_cfg`` (without ``eps`` each norm keeps the released model's: 1e-6 in
            blocks and output norms, 1e-5 in patch embeddings and reductions),
            ``init_cfg``, ... Outputs: ``H_i = ceil(H / (patch_size * 2**i))``.
    """

    official_keys = OFFICIAL_KEYS
    official_final_norm = False     # the official PVT has no final norm
    default_drop_path_rate = 0.1
    no_weight_decay_keys = ('norm', 'pos_embed')

    def __init__(self, arch: str = 'tiny', embed_dims: Optional[Sequence[int]] = None,
                 depths: Optional[Sequence[int]] = None,
                 num_heads: Optional[Sequence[int]] = None,
                 mlp_ratios: Optional[Sequence[float]] = None,
                 stage_types: Optional[Sequence[Union[str, Sequence[str]]]] = None,
                 sr_ratios: Sequence[int] = (8, 4, 2, 1), patch_size: int = 4,
                 pretrain_img_size: int = 224, **kwargs):
        cfg = self.resolve_arch(arch, embed_dims=embed_dims, depths=depths, num_heads=num_heads,
                                mlp_ratios=mlp_ratios, stage_types=stage_types)
        embed_dims, depths, num_heads = cfg['embed_dims'], cfg['depths'], cfg['num_heads']
        mlp_ratios, stage_types = cfg['mlp_ratios'], cfg['stage_types']
        sr_ratios = tuple(sr_ratios)
        n = len(depths)
        for name, value in (('embed_dims', embed_dims), ('num_heads', num_heads),
                            ('mlp_ratios', mlp_ratios), ('sr_ratios', sr_ratios)):
            if len(value) != n:
                raise ValueError(f'{name} {value} must have one entry per stage '
                                 f'(depths={depths})')
        if any(r < 1 for r in sr_ratios):
            raise ValueError(f'sr_ratios {sr_ratios} must be >= 1')
        super().__init__(embed_dims, depths, cfg['arch_name'], **kwargs)
        block_types = parse_stage_types(stage_types, depths)
        check_heads(embed_dims, num_heads)
        self.parse_inline_cfg(block_types)
        self.min_input_size = patch_size * 2 ** (n - 1)

        # The released model: LayerNorm eps 1e-6 in the blocks, 1e-5 in patch embeddings
        # and reductions; a norm_cfg with eps sets them all.
        block_norm = norm_layer(self.norm_cfg, BLOCK_NORM_EPS)
        norm, act = norm_layer(self.norm_cfg, 1e-5), act_layer(self.act_cfg)
        dpr = drop_path_rates(self.drop_path_rate, depths)
        self.stages = nn.ModuleList()
        for i, depth in enumerate(depths):
            stride = patch_size if i == 0 else 2
            grid = pretrain_img_size // (patch_size * 2 ** i)
            blocks = [TransformerBlock(
                embed_dims[i], num_heads[i], t, ATTENTION_TYPES[t], mlp_ratios[i], self.qkv_bias,
                self.drop_rate, self.attn_drop_rate, dpr[i][j], BLOCK_NORM_EPS,
                dict(sr_ratio=sr_ratios[i], norm_layer=norm) if t == SOFTMAX
                else self.inline_options[i], norm_layer=block_norm, act_layer=act)
                for j, t in enumerate(block_types[i])]
            self.stages.append(PVTStage(
                PatchEmbed(self.in_channels if i == 0 else embed_dims[i - 1], embed_dims[i],
                           stride, norm_layer=norm),
                PositionEmbedding(embed_dims[i], (grid, grid)), self.drop_rate, blocks))
        self._finish_init(output_norm_eps=BLOCK_NORM_EPS)

    def _stem_modules(self):
        return [self.stages[0].patch_embed, self.stages[0].pos_embed]

    def _init_extra(self):
        for stage in self.stages:
            trunc_normal_(stage.pos_embed.weight, std=.02)

    def _convert_official(self, state: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        return convert_pvt_checkpoint(state)

    def forward(self, x: torch.Tensor, valid_sizes=None) -> Tuple[torch.Tensor, ...]:
        x, valid = self.prepare_input(x, valid_sizes)
        outs = []
        for i, stage in enumerate(self.stages):
            tokens, hw, valid = stage(x, valid)
            if i in self.out_indices:
                outs.append(self.output(self._output_norm(i), tokens, hw, valid))
            if i + 1 < len(self.stages):
                # The next patch embedding's cells see zeros past an image.
                x = to_nchw(valid.zero_own(tokens), hw)
        return tuple(outs)


_PVT_RENAMES = [
    (re.compile(r'^pos_embed(\d+)$'), lambda m: f'stages.{int(m[1]) - 1}.pos_embed.weight'),
    (re.compile(r'^patch_embed(\d+)\.'), lambda m: f'stages.{int(m[1]) - 1}.patch_embed.'),
    (re.compile(r'^block(\d+)\.(\d+)\.'), lambda m: f'stages.{int(m[1]) - 1}.blocks.{m[2]}.'),
]


def convert_pvt_checkpoint(state: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """Official InLine-PVT state dict -> :class:`InLinePVT` keys (pure, idempotent).

    ``patch_embed{i}``/``pos_embed{i}``/``block{i}`` become ``stages.{i-1}.…``; in
    InLine blocks (those with ``attn.residual``) the official ``attn.q`` and
    ``attn.kv`` Linears are concatenated into one ``attn.qkv`` (rows q, k, v), the
    layout of the shared InLine attention module. Softmax blocks keep ``q``/``kv``.
    The classifier goes. Position tables are kept at their stored grid.
    """
    out = OrderedDict()
    for k, v in state.items():
        if k.startswith('head.'):
            continue
        for pattern, repl in _PVT_RENAMES:
            k, hit = pattern.subn(repl, k, count=1)
            if hit:
                break
        out[k] = v
    inline_attn = [k[:-len('residual.0.weight')] for k in out
                   if k.endswith('.attn.residual.0.weight')]
    for prefix in inline_attn:
        for p in ('weight', 'bias'):
            q, kv = f'{prefix}q.{p}', f'{prefix}kv.{p}'
            if q in out and kv in out:
                out[f'{prefix}qkv.{p}'] = torch.cat([out.pop(q), out.pop(kv)], dim=0)
    return out


# ------------------------------------------------------------------ the family and its variants
_PVT_COMMON = dict(embed_dims=(64, 128, 320, 512), num_heads=(2, 4, 10, 16),
                   mlp_ratios=(8, 8, 4, 4), stage_types=('inline',) * 4)
register_family(
    InLinePVT, convert=convert_pvt_checkpoint, strides=(4, 8, 16, 32),
    first_conv='stages.0.patch_embed.proj',
    # 32 channels in stage 1, not 16: on CPUs with AMX, oneDNN's bf16 convolutions
    # whose kernel equals the stride (the patch embedding, the spatial reduction)
    # were measured far off (rel. err. 0.1-0.3) for 8-28 input channels.
    smoke=dict(embed_dims=(32, 32, 48, 64), depths=(1, 2, 2, 1), num_heads=(1, 2, 3, 4),
               mlp_ratios=(2, 2, 2, 2), drop_path_rate=0.,
               stage_types=(('softmax',), 'inline', ('inline', 'softmax'), 'softmax')),
    variants=[
        Variant('tiny', dict(_PVT_COMMON, depths=(2, 2, 2, 2)),
                weights='pvt_t', url=official_url('90ac52b1555b401eb5e6')),
        Variant('small', dict(_PVT_COMMON, depths=(3, 4, 6, 3)),
                weights='pvt_s', url=official_url('1ab953b2479d433080a3')),
        Variant('medium', dict(_PVT_COMMON, depths=(3, 4, 18, 3)),
                weights='pvt_m', url=official_url('a72aec31e6084bc0a280')),
        # the official config calls it inline_pvt_b.yaml
        Variant('large', dict(_PVT_COMMON, depths=(3, 8, 27, 3)),
                weights='pvt_l', url=official_url('efd91318ba964f01b288')),
    ])
#: the presets by arch (declared by the variants above)
ARCH_SETTINGS = InLinePVT.presets
