"""InLine-Swin: Swin Transformer whose InLine stages attend globally at linear cost.

The family's presets, official-key pattern and converter live here, next to the model.
"""
from collections import OrderedDict
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.layers import DropPath, Mlp

from .attention import INLINE, SOFTMAX, InLineAttention, WindowAttention
from .base import InLineBackbone, check_heads, parse_stage_types
from .layers import BlockStage, PatchEmbed, drop_path_rates
from .padding import ValidMap

__all__ = ['InLineSwin', 'convert_swin_checkpoint', 'ARCH_SETTINGS', 'OFFICIAL_KEYS']

#: attention of each block type, all called as ``attn(x, hw)``
ATTENTIONS = {INLINE: InLineAttention, SOFTMAX: WindowAttention}
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


class SwinBlock(nn.Module):
    """Pre-norm transformer block; its attention comes from :data:`ATTENTIONS`, with
    ``attn_options[attn_type]`` (if any) as extra arguments."""

    def __init__(self, dim: int, num_heads: int, attn_type: str, mlp_ratio: float,
                 qkv_bias: bool, drop: float, attn_drop: float, drop_path: float,
                 attn_options: Optional[Dict[str, dict]] = None):
        super().__init__()
        self.attn_type = attn_type
        self.norm1 = nn.LayerNorm(dim)
        self.attn = ATTENTIONS[attn_type](dim, num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop,
                                          proj_drop=drop,
                                          **(attn_options or {}).get(attn_type, {}))
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), act_layer=nn.GELU, drop=drop)

    def forward(self, x: torch.Tensor, hw: Tuple[int, int],
                valid: Optional[ValidMap] = None) -> torch.Tensor:
        x = x + self.drop_path(self.attn(self.norm1(x), hw, valid=valid))
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


class SwinStage(BlockStage):
    """Blocks, then (applied by the backbone after the stage output) ``downsample``."""

    def __init__(self, blocks: List[SwinBlock], downsample: Optional[PatchMerging]):
        super().__init__(blocks)
        self.downsample = downsample

    def forward(self, x: torch.Tensor, hw: Tuple[int, int],
                valid: Optional[ValidMap] = None) -> torch.Tensor:
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
        init_cfg (dict, optional): ``dict(type='Pretrained', checkpoint=PATH)`` loads
            an official ImageNet file, a state dict, an OpenMMLab checkpoint or a
            converted ``.safetensors``; extra keys: ``allow_pickle`` (bool, trust the
            file), ``checkpoint_key`` (e.g. ``'state_dict_ema'``), ``min_match``
            (fraction of tensors that must be found, default 0.9). Default: None.

    Returns (forward ``(x, valid_sizes=None)``; ``valid_sizes``, one ``(h, w)`` per
    image, overrides reading the padding from ``x``):
        tuple[Tensor]: ``(B, C_i, H_i, W_i)`` for each ``i`` in ``out_indices``, zero
        outside each image's region.
    """

    presets = ARCH_SETTINGS
    official_keys = OFFICIAL_KEYS
    block_key = r'layers\.(?P<stage>\d+)\.blocks\.(?P<block>\d+)\.'

    def __init__(self, arch: str = 'tiny', embed_dims: Optional[int] = None,
                 depths: Optional[Sequence[int]] = None,
                 num_heads: Optional[Sequence[int]] = None,
                 stage_types: Optional[Sequence[Union[str, Sequence[str]]]] = None,
                 in_channels: int = 3, patch_size: int = 4, window_size: int = 7,
                 mlp_ratio: float = 4., qkv_bias: bool = True, drop_rate: float = 0.,
                 attn_drop_rate: float = 0., drop_path_rate: float = 0.2,
                 out_indices: Sequence[int] = (0, 1, 2, 3), frozen_stages: int = -1,
                 with_cp: bool = False, pad_aware: bool = True, init_cfg: Optional[dict] = None):
        cfg = self.resolve_arch(arch, embed_dims=embed_dims, depths=depths, num_heads=num_heads,
                                stage_types=stage_types)
        embed_dims = cfg['embed_dims']
        depths = cfg['depths']
        num_heads = cfg['num_heads']
        stage_types = cfg['stage_types']
        if len(num_heads) != len(depths):
            raise ValueError(f'num_heads {num_heads} and depths {depths} must have one entry '
                             'per stage')
        super().__init__(out_indices, frozen_stages, len(depths), init_cfg=init_cfg,
                         pad_aware=pad_aware)
        self.arch_name = cfg['arch_name']
        block_types = parse_stage_types(stage_types, depths)
        dims = [embed_dims * 2 ** i for i in range(len(depths))]
        check_heads(dims, num_heads)
        self.dims = dims
        self.depths = depths
        self.in_channels = in_channels

        self.patch_embed = PatchEmbed(in_channels, embed_dims, patch_size)
        self.drop_after_pos = nn.Dropout(drop_rate)
        dpr = drop_path_rates(drop_path_rate, depths)
        self.layers = nn.ModuleList()
        for i, depth in enumerate(depths):
            # Odd-numbered softmax blocks of a stage shift their windows.
            blocks = [SwinBlock(dims[i], num_heads[i], block_types[i][j], mlp_ratio, qkv_bias,
                                drop_rate, attn_drop_rate, dpr[i][j],
                                {SOFTMAX: dict(window_size=window_size, shift=j % 2 == 1)})
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

    def _convert_official(self, state: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        return convert_swin_checkpoint(state, last_stage=len(self.dims) - 1)

    def forward(self, x: torch.Tensor, valid_sizes=None) -> Tuple[torch.Tensor, ...]:
        x, valid = self.prepare_input(x, valid_sizes)
        x, hw = self.patch_embed(x)
        x = self.drop_after_pos(x)
        if valid is not None:
            valid = valid.scaled(hw, self.patch_embed.patch_size)
        outs = []
        for i, stage in enumerate(self.layers):
            x = stage(x, hw, valid)
            if i in self.out_indices:
                outs.append(self.output(self._output_norm(i), x, hw, valid))
            if stage.downsample is not None:
                if valid is not None:
                    x = valid.zero(x)       # merged 2x2 cells see zeros past an image
                x, hw = stage.downsample(x, hw)
                if valid is not None:
                    valid = valid.scaled(hw, 2)
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
