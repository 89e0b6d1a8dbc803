"""InLine-DeiT: a plain ViT/DeiT whose every block is InLine attention over all tokens.

The family's presets, official-key pattern and converter live here, next to the model.
"""
from collections import OrderedDict
from typing import Dict, Optional, Tuple

import torch
import torch.nn as nn
from timm.layers import resample_abs_pos_embed, trunc_normal_

from .attention import INLINE, InLineAttention
from .base import InLineBackbone
from .families import Variant, official_url, register_family
from .checkpoint import CheckpointError
from .layers import PatchEmbed, TransformerBlock, drop_path_rates, run_block, to_nchw
from .norm_act import act_layer, norm_layer
from .padding import ValidMap

__all__ = ['InLineDeiT', 'InLineAttentionWithClsToken', 'resize_pos_embed',
           'convert_deit_checkpoint', 'ARCH_SETTINGS', 'OFFICIAL_KEYS']

#: official and converted InLine-DeiT state dicts (the names agree), and no other
#: family's, have a class token and top-level ``blocks``
OFFICIAL_KEYS = (r'^cls_token$', r'^blocks\.0\.')

#: LayerNorm eps of the blocks and the final norm (timm ViT/DeiT).
NORM_EPS = 1e-6


def resize_pos_embed(pos_embed: torch.Tensor, src_grid: Tuple[int, int],
                     dst_grid: Tuple[int, int], num_prefix: int = 1) -> torch.Tensor:
    """Position table ``(1, num_prefix + Hs*Ws, C)`` -> ``(1, num_prefix + Hd*Wd, C)``.

    The official resize (timm ``resize_pos_embed`` as used by the released
    ``checkpoint_filter_fn``): the class-token entries are kept, the grid part is
    resized bilinearly (``align_corners=False``, no antialiasing), through timm's
    ``resample_abs_pos_embed`` (which computes in fp32 and returns the table's dtype).
    Returns the table itself when the grids agree.
    """
    src_grid, dst_grid = tuple(src_grid), tuple(dst_grid)
    if src_grid == dst_grid:
        return pos_embed
    return resample_abs_pos_embed(pos_embed, list(dst_grid), list(src_grid),
                                  num_prefix_tokens=num_prefix, interpolation='bilinear',
                                  antialias=False)


# Under FX the grid is unknown while tracing: the resize is a node run with the graph.
torch.fx.wrap('resize_pos_embed')


class InLineAttentionWithClsToken(InLineAttention):
    """InLine attention over leading extra tokens plus an ``H x W`` map (InLine-DeiT):
    :class:`InLineAttention` with ``num_prefix_tokens=num_prefix``.

    As released: the linear attention (means and ``K^T V``) runs over all
    ``num_prefix + H*W`` tokens, the class token included; the 3x3 kernels are
    predicted from the mean of all tokens of the input; the local term convolves the
    patch tokens' V as an ``H x W`` image and is added to the patch tokens only.
    Parameters and their names are those of :class:`InLineAttention` (and of the
    official ``InLineAttention`` of ``inline_deit.py``).

    Args:
        dim (int): Channels ``C``.
        num_heads (int): Heads; must divide ``dim``.
        num_prefix (int): Tokens before the map (the class token). Default: 1.
        qkv_bias (bool): Bias of the qkv projection. Default: True.
        attn_drop (float): Dropout on the attention output before the projection.
            Default: 0.
        proj_drop (float): Dropout after the projection. Default: 0.
        **inline_options: The paper's switches (``attention``, ``kernel``,
            ``local_residual``) of :class:`InLineAttention`.
    """

    def __init__(self, dim: int, num_heads: int, num_prefix: int = 1, qkv_bias: bool = True,
                 attn_drop: float = 0., proj_drop: float = 0., **inline_options):
        super().__init__(dim, num_heads, qkv_bias=qkv_bias, num_prefix_tokens=num_prefix,
                         attn_drop=attn_drop, proj_drop=proj_drop, **inline_options)


class InLineDeiT(InLineBackbone):
    """InLine-DeiT backbone.

    The plain ViT/DeiT of Han et al., "Bridging the Divide: Reconsidering Softmax
    and Linear Attention", NeurIPS 2024 (arXiv 2412.06590): one stride-16 patch
    embedding, a class token, a learned position table and ``depth`` pre-norm
    blocks whose attention is InLine over the class token and every patch token
    (linear in the number of pixels), with the predicted local 3x3 term on the patch
    map. As a dense-prediction backbone it returns the patch tokens of chosen blocks
    as stride-16 maps (mmseg ``VisionTransformer`` convention); necks make the
    pyramid (``MultiLevelNeck`` for UperNet, ``SimpleFPN`` for Mask R-CNN).

    Any input of at least 16x16 pixels works, square or not: the image is padded
    to a multiple of 16 (bottom/right), and the position table, stored at its
    training grid, is resized to the input's patch grid at every forward as the
    official code does (bilinear, ``align_corners=False``, class token kept).

    Args:
        arch (str): Preset, ``'tiny'``, ``'small'`` or ``'base'`` (the released
            layouts, see ``ARCH_SETTINGS``; note that -B is 384 wide). The explicit
            arguments below, when given, override the preset. Default: ``'tiny'``.
        embed_dims (int, optional): Channels.
        depth (int, optional): Blocks.
        num_heads (int, optional): Heads.
        pretrain_img_size (int, optional): Image side the position table was trained
            at; its stored grid is ``pretrain_img_size // patch_size`` (224, 288 and
            448 for T, S, B, i.e. grids 14, 18 and 28).
        patch_size (int): Patch side and stride. Default: 16.
        mlp_ratio (float): MLP hidden / embedding channels. Default: 4.
        final_norm (bool): Apply the final LayerNorm ``norm`` (from the official
            checkpoint) to the last block's output. When False the module is not
            built. Default: True.
        **kwargs: What every InLine backbone takes (``InLineBackbone``), counting blocks
            as stages: ``out_indices`` (default (2, 5, 8, 11); each a ``(B, C, ceil(H/16),
            ceil(W/16))`` map of the block's patch tokens, no output norms),
            ``frozen_stages`` (0 freezes the patch embedding, class token and position
            table; ``depth`` also ``norm``), ``with_cp``, ``drop_path_rate`` (default
            0.1), ``impl``, ``pad_aware`` (the position table resized to each image's own
            grid), ``inline_cfg`` (one entry per block), ``norm_cfg`` (eps 1e-6 without
            one), ``init_cfg``, ...
    """

    official_keys = OFFICIAL_KEYS
    block_key = r'blocks\.(?P<block>\d+)\.'
    min_input_size = 16          # one patch (at the default patch size)
    stage_downsample = 1         # every block keeps the patch grid
    no_weight_decay_keys = ('norm', 'pos_embed', 'cls_token')
    default_drop_path_rate = 0.1
    default_out_indices = (2, 5, 8, 11)

    def __init__(self, arch: str = 'tiny', embed_dims: Optional[int] = None,
                 depth: Optional[int] = None, num_heads: Optional[int] = None,
                 pretrain_img_size: Optional[int] = None, patch_size: int = 16,
                 mlp_ratio: float = 4., final_norm: bool = True, **kwargs):
        cfg = self.resolve_arch(arch, embed_dims=embed_dims, depth=depth, num_heads=num_heads,
                                pretrain_img_size=pretrain_img_size)
        embed_dims, depth = cfg['embed_dims'], cfg['depth']
        num_heads, pretrain_img_size = cfg['num_heads'], cfg['pretrain_img_size']
        if depth < 1:
            raise ValueError(f'depth must be >= 1, got {depth}')
        if embed_dims % num_heads:
            raise ValueError(f'{embed_dims} channels are not divisible by {num_heads} heads')
        if patch_size < 1 or pretrain_img_size < patch_size:
            raise ValueError(f'pretrain_img_size ({pretrain_img_size}) must hold at least one '
                             f'patch of {patch_size}')
        # The blocks are the base class's stages: dims are every block's channels, and
        # depths the one "stage" of blocks of the variant check.
        super().__init__([embed_dims] * depth, (depth,), cfg['arch_name'], **kwargs)
        self.embed_dims = embed_dims
        self.depth = depth
        self.patch_size = patch_size
        self.min_input_size = patch_size
        self.final_norm = final_norm
        self.pos_grid = (pretrain_img_size // patch_size,) * 2
        self.parse_inline_cfg([[INLINE]] * depth)

        # Official names: patch_embed.proj, cls_token, pos_embed, blocks.{i}, norm.
        self.patch_embed = PatchEmbed(self.in_channels, embed_dims, patch_size, norm=False)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dims))
        self.pos_embed = nn.Parameter(
            torch.zeros(1, 1 + self.pos_grid[0] * self.pos_grid[1], embed_dims))
        self.pos_drop = nn.Dropout(self.drop_rate)
        norm, act = norm_layer(self.norm_cfg, NORM_EPS), act_layer(self.act_cfg)
        (dpr,) = drop_path_rates(self.drop_path_rate, (depth,))
        # The official InLineBlock: a pre-norm block with InLine attention.
        self.blocks = nn.ModuleList(
            TransformerBlock(embed_dims, num_heads, INLINE, InLineAttentionWithClsToken,
                             mlp_ratio, self.qkv_bias, self.drop_rate, self.attn_drop_rate,
                             dpr[i], NORM_EPS,
                             self.inline_options[i], norm_layer=norm, act_layer=act)
            for i in range(depth))
        if final_norm:
            self.norm = norm(embed_dims)
        self._finish_init(output_norm_eps=None)

    # The blocks are the "stages" of the base class: out_indices and frozen_stages
    # count blocks, and there are no per-output norms.
    def _stage_list(self) -> nn.ModuleList:
        return self.blocks

    def _stage_modules(self, i: int):
        last = i == self.depth - 1 and self.final_norm
        return [self.blocks[i]] + ([self.norm] if last else [])

    def _stem_modules(self):
        return [self.patch_embed, self.cls_token, self.pos_embed]

    def _init_extra(self):
        trunc_normal_(self.pos_embed, std=.02)
        trunc_normal_(self.cls_token, std=.02)

    def _convert_official(self, state: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        return convert_deit_checkpoint(state)

    def convert_checkpoint(self, state: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """The base checks (family, depth), then the position table's grid."""
        state = super().convert_checkpoint(state)
        check_position_grid(self, state)
        return state

    def embed(self, x: torch.Tensor, valid: ValidMap
              ) -> Tuple[torch.Tensor, Tuple[int, int], ValidMap]:
        """Image -> ``(B, 1 + H'*W', C)`` tokens with positions, ``(H', W')`` and the
        images' regions on the patch grid (``valid``: theirs on the image). Each image
        gets the table resized to its own grid."""
        x, hw = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        valid = valid.scaled(hw, self.patch_size, prefix=1)
        if valid.is_padded:
            gh, gw = self.pos_grid
            table = self.pos_embed[:, 1:].reshape(1, gh, gw, -1).permute(0, 3, 1, 2)
            grid = valid.table(table, hw)
        else:
            grid = resize_pos_embed(self.pos_embed, self.pos_grid, hw)[:, 1:]
        cls_pos = self.pos_embed[:, :1].expand(grid.shape[0], -1, -1)
        return self.pos_drop(x + torch.cat([cls_pos, grid], dim=1)), hw, valid

    def forward(self, x: torch.Tensor, valid_sizes=None) -> Tuple[torch.Tensor, ...]:
        x, valid = self.prepare_input(x, valid_sizes)
        x, hw, valid = self.embed(x, valid)
        outs = {}
        last = max(self.out_indices)
        for i, blk in enumerate(self.blocks[:last + 1]):
            x = run_block(blk, x, hw, blk.with_cp, valid)
            if i == self.depth - 1 and self.final_norm:
                x = self.norm(x)
            if i in self.out_indices:
                outs[i] = valid.zero_image_(to_nchw(x[:, 1:], hw))
        return tuple(outs[i] for i in self.out_indices)


def convert_deit_checkpoint(state: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """Official InLine-DeiT state dict -> :class:`InLineDeiT` keys (pure, idempotent).

    The names already agree; the classifier (``head``, and ``head_dist``/``dist_token``
    of distilled DeiTs, which InLine-DeiT does not release) goes. The position table is
    kept at its stored grid: it is resized at every forward, not at load time.
    """
    return OrderedDict((k, v) for k, v in state.items()
                       if not k.startswith(('head.', 'head_dist.', 'pre_logits.'))
                       and k != 'dist_token')


def check_position_grid(model: InLineDeiT, state: Dict[str, torch.Tensor]) -> None:
    """Refuse a position table of another training grid, naming the variant it is of.

    (Another width shows as other shapes, another depth is refused by the base class;
    a table of another grid would only show as a bare shape mismatch.)
    """
    pos = state.get('pos_embed')
    if pos is None or pos.shape[-1] != model.embed_dims \
            or pos.shape[1] == model.pos_embed.shape[1]:
        return
    name = type(model).__name__
    side = round((pos.shape[1] - 1) ** 0.5)
    guess = [a for a, s in ARCH_SETTINGS.items()
             if s['pretrain_img_size'] // model.patch_size == side
             and s['embed_dims'] == model.embed_dims]
    hint = (f' (arch={guess[0]!r})' if guess
            else f' (pretrain_img_size={side * model.patch_size})')
    raise CheckpointError(
        f'the position table of this checkpoint has a {side}x{side} grid{hint}, but this '
        f'{name} ({model.arch_name}) stores {model.pos_grid[0]}x{model.pos_grid[1]}: it is '
        'another variant. Build the model with the matching arch or pretrain_img_size.')


# ------------------------------------------------------------------ the family and its variants
# The released layouts (official inline_deit_{tiny,small,base}) and the image side each was
# trained at, which fixes the grid of its stored position table (14, 18, 28). ``depths`` is
# the depth as the family table reads it (one "stage" of blocks).
register_family(
    InLineDeiT, convert=convert_deit_checkpoint, strides=(16,), first_conv='patch_embed.proj',
    smoke=dict(embed_dims=32, depth=12, num_heads=2, mlp_ratio=1., pretrain_img_size=64,
               drop_path_rate=0.),
    out_unit='block', output_norms=False,
    variants=[
        Variant('tiny', dict(embed_dims=192, depth=12, depths=(12,), num_heads=6,
                             pretrain_img_size=224),
                weights='deit_t', url=official_url('1d6b8191ad6d4114b291')),
        Variant('small', dict(embed_dims=320, depth=12, depths=(12,), num_heads=10,
                              pretrain_img_size=288),
                weights='deit_s', url=official_url('2f3898b07e9247f3beb3')),
        Variant('base', dict(embed_dims=384, depth=12, depths=(12,), num_heads=12,
                             pretrain_img_size=448),
                weights='deit_b', url=official_url('10bdd726d4b0435eb34e')),
    ])
#: the presets by arch (declared by the variants above)
ARCH_SETTINGS = InLineDeiT.presets
