"""Layers the InLine backbones share: patch embedding, windows, token layout, stages.

Only plain modules and functions; nothing here knows a family.
"""
from typing import List, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint as cp

__all__ = ['round_up', 'pad_amount', 'to_nchw', 'to_tokens', 'window_partition', 'window_merge', 'PatchEmbed',
           'run_block', 'BlockStage', 'drop_path_rates']


# Map-size arithmetic is written with non-negative operands only: under tracing the
# sizes are recorded ops, and ONNX's integer Div/Mod truncate toward zero, so Python's
# ``-(-h // w)`` and ``-h % p`` idioms would export as wrong constants.
def round_up(n: int, multiple: int) -> int:
    """Smallest multiple of ``multiple`` that is >= ``n``."""
    return (n + multiple - 1) // multiple * multiple


def pad_amount(n: int, multiple: int) -> int:
    """How much to add to ``n`` to reach a multiple of ``multiple``."""
    return (multiple - n % multiple) % multiple


def to_nchw(x: torch.Tensor, hw: Tuple[int, int]) -> torch.Tensor:
    """``(B, H*W, C)`` tokens -> contiguous ``(B, C, H, W)``."""
    # Contiguous, not the channels-last view the transpose gives: mmcv's RoIAlign
    # (CPU and CUDA) indexes its input as dense NCHW and silently reads a strided
    # map wrongly, so a Mask R-CNN on such features cannot learn its RoI heads.
    return x.transpose(1, 2).reshape(x.shape[0], x.shape[2], *hw).contiguous()


def to_tokens(x: torch.Tensor) -> Tuple[torch.Tensor, Tuple[int, int]]:
    """``(B, C, H, W)`` -> ``(B, H*W, C)`` tokens and ``(H, W)``."""
    return x.flatten(2).transpose(1, 2), (x.shape[2], x.shape[3])


def window_partition(x: torch.Tensor, wh: int, ww: int) -> torch.Tensor:
    """``(B, H, W, C)`` -> ``(B * nW, wh * ww, C)``; ``H``, ``W`` multiples of the window."""
    b, h, w, c = x.shape
    x = x.view(b, h // wh, wh, w // ww, ww, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, wh * ww, c)


def window_merge(x: torch.Tensor, wh: int, ww: int, h: int, w: int) -> torch.Tensor:
    """Inverse of :func:`window_partition`: ``(B * nW, wh * ww, C)`` -> ``(B, H, W, C)``."""
    c = x.shape[-1]
    x = x.view(-1, h // wh, w // ww, wh, ww, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, h, w, c)


class PatchEmbed(nn.Module):
    """Non-overlapping ``patch x patch`` convolution (+ LayerNorm); the image is
    zero-padded to a multiple of the patch, so the map is ``ceil(H / p) x ceil(W / p)``.

    Args:
        in_channels (int): Input channels.
        dim (int): Output channels.
        patch_size (int): Patch side and stride. Default: 4.
        norm (bool): LayerNorm the tokens (key ``norm``). Default: True.
    """

    def __init__(self, in_channels: int, dim: int, patch_size: int = 4, norm: bool = True):
        super().__init__()
        self.patch_size = patch_size
        self.proj = nn.Conv2d(in_channels, dim, patch_size, patch_size)
        self.norm = nn.LayerNorm(dim) if norm else None

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, Tuple[int, int]]:
        """``(B, C_in, H, W)`` -> ``(B, H' * W', C)`` tokens and ``(H', W')``."""
        p = self.patch_size
        h, w = x.shape[-2:]
        if h % p or w % p:
            x = F.pad(x, (0, pad_amount(w, p), 0, pad_amount(h, p)))
        x, hw = to_tokens(self.proj(x))
        return (x if self.norm is None else self.norm(x)), hw


def run_block(block: nn.Module, x: torch.Tensor, hw: Tuple[int, int],
              with_cp: bool = False, valid=None) -> torch.Tensor:
    """``block(x, hw, valid)``, gradient-checkpointed (non-reentrant) when ``with_cp``
    and ``x`` needs a gradient (so frozen or inference passes never recompute).
    ``valid``: the images' regions of a padded batch (:class:`.padding.ValidMap`) or
    None."""
    if with_cp and x.requires_grad:
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

    def run_blocks(self, x: torch.Tensor, hw: Tuple[int, int], valid=None) -> torch.Tensor:
        for block in self.blocks:
            x = run_block(block, x, hw, self.with_cp, valid)
        return x


def drop_path_rates(rate: float, depths: Sequence[int]) -> List[List[float]]:
    """Stochastic depth per block, rising linearly from 0 to ``rate`` over all blocks,
    grouped per stage (computed on the CPU, so models build on the meta device)."""
    flat = torch.linspace(0, rate, sum(depths), device='cpu').tolist()
    starts = [sum(depths[:i]) for i in range(len(depths))]
    return [flat[s:s + d] for s, d in zip(starts, depths)]
