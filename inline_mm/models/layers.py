"""Layers the InLine backbones share: patch embedding, windows, token layout, stages.

Only plain modules and functions; nothing here knows a family.
"""
from functools import partial
from typing import Callable, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint as cp
from timm.layers import DropPath, Mlp

from .padding import NO_PADDING
from .tracing import fx_leaf, is_fx_proxy

__all__ = ['ceil_div', 'round_up', 'pad_amount', 'symbolic', 'pad_image', 'to_nchw', 'to_tokens',
           'window_partition', 'window_merge', 'PatchEmbed', 'TransformerBlock', 'run_block',
           'BlockStage', 'drop_path_rates']


# Map-size arithmetic is written with non-negative operands only: under tracing the
# sizes are recorded ops, and ONNX's integer Div/Mod truncate toward zero, so Python's
# ``-(-h // w)`` and ``-h % p`` idioms would export as wrong constants.
def ceil_div(n: int, d: int) -> int:
    """``ceil(n / d)``."""
    return (n + d - 1) // d


def round_up(n: int, multiple: int) -> int:
    """Smallest multiple of ``multiple`` that is >= ``n``."""
    return ceil_div(n, multiple) * multiple


def pad_amount(n: int, multiple: int) -> int:
    """How much to add to ``n`` to reach a multiple of ``multiple``."""
    # round_up(n) - n, not a Mod: with symbolic sizes (torch.compile dynamic) the padded
    # side n + pad is then round_up(n) itself, and every later size stays one short
    # expression of the input size instead of growing stage by stage.
    return round_up(n, multiple) - n


def symbolic(*sizes) -> bool:
    """Whether sizes may be symbolic: under ``torch.compile`` (``sizes`` are documentation;
    an ``isinstance(h, torch.SymInt)`` test is not seen by dynamo as it runs).

    A test such as ``if h % 4`` on a symbolic size is a guard of the compiled graph:
    each residue would compile anew. Code that pads or masks "only where needed" does
    it unconditionally when this is True (padding by 0 is a no-op of the graph)."""
    return torch.compiler.is_compiling()


def crop(x: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """``x[:, :h, :w]`` of a padded ``(B, Hp, Wp, C)`` map. Under ``torch.compile`` a
    contiguous copy: a later ``reshape`` of the crop would otherwise guard on whether it
    is a no-op (``Wp == w``, a side that is a multiple of the window), and every size on
    the other side of that guard would compile anew."""
    if symbolic(h, w):
        # A copy op: a view would have its contiguity decided, i.e. guarded, at once.
        return torch.slice_copy(torch.slice_copy(x, 1, 0, h), 2, 0, w)
    return x[:, :h, :w]


def pad_image(x: torch.Tensor, multiple: int) -> torch.Tensor:
    """``(B, C, H, W)`` zero-padded at the bottom and right to multiples of ``multiple``
    (itself when they are)."""
    h, w = x.shape[-2:]
    if symbolic(h, w) or h % multiple or w % multiple:
        x = F.pad(x, (0, pad_amount(w, multiple), 0, pad_amount(h, multiple)))
    return x


# Under FX the sides are unknown while tracing: the padding is a node run with the graph.
torch.fx.wrap('pad_image')


def to_nchw(x: torch.Tensor, hw: Tuple[int, int]) -> torch.Tensor:
    """``(B, H*W, C)`` tokens -> contiguous ``(B, C, H, W)``."""
    # Contiguous, not the channels-last view the transpose gives: mmcv's RoIAlign
    # (CPU and CUDA) indexes its input as dense NCHW and silently reads a strided
    # map wrongly, so a Mask R-CNN on such features cannot learn its RoI heads.
    # hw[0], hw[1], not *hw: under FX a leaf's hw is one value that cannot be unpacked.
    return x.transpose(1, 2).reshape(x.shape[0], x.shape[2], hw[0], hw[1]).contiguous()


def to_tokens(x: torch.Tensor) -> Tuple[torch.Tensor, Tuple[int, int]]:
    """``(B, C, H, W)`` -> ``(B, H*W, C)`` tokens and ``(H, W)``."""
    return x.flatten(2).transpose(1, 2), (x.shape[2], x.shape[3])


def window_partition(x: torch.Tensor, wh: int, ww: int) -> torch.Tensor:
    """``(B, H, W, C)`` -> ``(B * nW, wh * ww, C)``; ``H``, ``W`` multiples of the window."""
    b, h, w, c = x.shape
    x = x.view(b, h // wh, wh, w // ww, ww, c).permute(0, 1, 3, 2, 4, 5)
    # Sizes spelled out, not -1: with symbolic sizes an inferred -1 is a quotient of
    # products that no later size simplifies away.
    return x.reshape(b * (h // wh) * (w // ww), wh * ww, c)


def window_merge(x: torch.Tensor, wh: int, ww: int, h: int, w: int,
                 b: Optional[int] = None) -> torch.Tensor:
    """Inverse of :func:`window_partition`: ``(B * nW, wh * ww, C)`` -> ``(B, H, W, C)``
    (``b``: ``B``, inferred when None; give it where sizes may be symbolic)."""
    c = x.shape[-1]
    b = x.shape[0] // ((h // wh) * (w // ww)) if b is None else b
    x = x.view(b, h // wh, w // ww, wh, ww, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(b, h, w, c)


class PatchEmbed(nn.Module):
    """Non-overlapping ``patch x patch`` convolution (+ LayerNorm); the image is
    zero-padded to a multiple of the patch, so the map is ``ceil(H / p) x ceil(W / p)``.

    Args:
        in_channels (int): Input channels.
        dim (int): Output channels.
        patch_size (int): Patch side and stride. Default: 4.
        norm (bool): LayerNorm the tokens (key ``norm``). Default: True.
        norm_layer (callable, optional): Builds that norm from the channels
            (:func:`.norm_act.norm_layer`). Default: ``nn.LayerNorm``.
    """

    def __init__(self, in_channels: int, dim: int, patch_size: int = 4, norm: bool = True,
                 norm_layer: Optional[Callable[[int], nn.Module]] = None):
        super().__init__()
        self.patch_size = patch_size
        self.proj = nn.Conv2d(in_channels, dim, patch_size, patch_size)
        self.norm = (norm_layer or nn.LayerNorm)(dim) if norm else None

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, Tuple[int, int]]:
        """``(B, C_in, H, W)`` -> ``(B, H' * W', C)`` tokens and ``(H', W')``."""
        x, hw = to_tokens(self.proj(pad_image(x, self.patch_size)))
        return (x if self.norm is None else self.norm(x)), hw


class TransformerBlock(nn.Module):
    """Pre-norm transformer block (InLine-Swin, -PVT and -DeiT):
    ``x + attn(norm1(x))``, then ``x + mlp(norm2(x))``, with stochastic depth.

    Args:
        dim (int): Channels.
        num_heads (int): Heads.
        attn_type (str): The block type, kept as ``attn_type``.
        attention (type): The attention class, built as
            ``attention(dim, num_heads, qkv_bias=, attn_drop=, proj_drop=, **attn_options)``
            and called as the contract of :mod:`.attention` says.
        mlp_ratio (float): MLP hidden / embedding channels.
        qkv_bias (bool): Bias of the qkv projection.
        drop (float): Dropout after the projections and in the MLP.
        attn_drop (float): Attention dropout.
        drop_path (float): Stochastic depth of both branches.
        norm_eps (float): LayerNorm eps (1e-5 Swin, 1e-6 PVT and DeiT). Default: 1e-5.
        attn_options (dict, optional): Extra arguments of the attention.
        norm_layer (callable, optional): Builds ``norm1``/``norm2`` from the channels
            (:func:`.norm_act.norm_layer`). Default: LayerNorm with ``norm_eps``.
        act_layer (callable, optional): The MLP's activation
            (:func:`.norm_act.act_layer`). Default: ``nn.GELU``.
    """

    def __init__(self, dim: int, num_heads: int, attn_type: str, attention: type,
                 mlp_ratio: float, qkv_bias: bool, drop: float, attn_drop: float,
                 drop_path: float, norm_eps: float = 1e-5, attn_options: Optional[dict] = None,
                 norm_layer: Optional[Callable[[int], nn.Module]] = None,
                 act_layer: Optional[Callable[[], nn.Module]] = None):
        super().__init__()
        norm_layer = norm_layer or partial(nn.LayerNorm, eps=norm_eps)
        self.attn_type = attn_type
        self.norm1 = norm_layer(dim)
        self.attn = attention(dim, num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop,
                              proj_drop=drop, **(attn_options or {}))
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.norm2 = norm_layer(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), act_layer=act_layer or nn.GELU, drop=drop)

    @fx_leaf
    def forward(self, x: torch.Tensor, hw: Tuple[int, int], valid=NO_PADDING) -> torch.Tensor:
        x = x + self.drop_path(self.attn(self.norm1(x), hw, valid=valid))
        return x + self.drop_path(self.mlp(self.norm2(x)))


def run_block(block: nn.Module, x: torch.Tensor, hw: Tuple[int, int], with_cp: bool,
              valid) -> torch.Tensor:
    """``block(x, hw, valid)``, gradient-checkpointed (non-reentrant) when ``with_cp``
    and ``x`` needs a gradient (so frozen or inference passes never recompute).
    ``valid``: the images' regions (:class:`.padding.ValidMap`, ``NO_PADDING`` for
    none)."""
    if with_cp and not is_fx_proxy(x) and x.requires_grad:
        return cp.checkpoint(block, x, hw, valid, use_reentrant=False)
    return block(x, hw, valid)


class BlockStage(nn.Module):
    """A stage's blocks (key ``blocks``), each called as ``block(x, hw, valid)``.

    Families subclass it to add what comes before the blocks (a patch embedding, a
    merge); the backbone sets ``with_cp`` on every stage.
    """

    def __init__(self, blocks: Sequence[nn.Module]):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.with_cp = False

    def run_blocks(self, x: torch.Tensor, hw: Tuple[int, int], valid) -> torch.Tensor:
        for block in self.blocks:
            x = run_block(block, x, hw, self.with_cp, valid)
        return x


def drop_path_rates(rate: float, depths: Sequence[int]) -> List[List[float]]:
    """Stochastic depth per block, rising linearly from 0 to ``rate`` over all blocks,
    grouped per stage (computed on the CPU, so models build on the meta device)."""
    flat = torch.linspace(0, rate, sum(depths), device='cpu').tolist()
    starts = [sum(depths[:i]) for i in range(len(depths))]
    return [flat[s:s + d] for s, d in zip(starts, depths)]
