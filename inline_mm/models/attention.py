"""The attention shared by the InLine families, and the call contract every attention
of every family keeps.

The contract (written here once; the family files refer to it):

* an attention is an ``nn.Module`` built as ``cls(dim, num_heads, *, qkv_bias,
  attn_drop, proj_drop, **options)`` and called as ``attn(x, hw, token_mean=None,
  valid=None)`` on ``(B, N, C)`` tokens of an ``hw = (H, W)`` map, row-major,
  returning ``(B, N, C)``;
* ``token_mean`` ``(B, C)`` feeds InLine's local kernels (the others ignore it);
* ``valid`` (:class:`.padding.ValidMap`) gives each image's region of a padded
  batch: statistics and keys stay inside it, and every image gets what it would
  get alone. ``valid.is_padded`` False (:data:`.padding.NO_PADDING`) is the plain
  path. Tokens outside an image may be anything finite on the way in, and their
  outputs are ignored; the caller's tensors are never written;
* an attention that can run on a projection made elsewhere (InLine-CSwin keeps qkv
  in its block) also offers ``attend(qkv, hw, token_mean=None, valid=None)`` on the
  ``(B, N, 3C)`` projection output;
* a family maps its block types (:data:`INLINE`, :data:`SOFTMAX`) to classes in a
  table named ``ATTENTION_TYPES``.

The formula itself, with its kernels and references, is :mod:`.inline_function`.
"""
from typing import Optional, Tuple

import torch
import torch.nn as nn

from .inline_function import inline_qkv
from .padding import NO_PADDING, ValidMap

__all__ = ['INLINE', 'SOFTMAX', 'InLineAttention']

#: the two block types of ``stage_types``
INLINE, SOFTMAX = 'inline', 'softmax'


class InLineAttention(nn.Module):
    """InLine attention over a whole ``H x W`` token map (Han et al., NeurIPS 2024,
    arXiv 2412.06590).

    Parameter names follow the official code (``qkv``, ``proj``, ``residual.{0,2}``;
    optional ``lepe`` for InLine-CSwin's locally enhanced positional term).

    Args:
        dim (int): Channels ``C``.
        num_heads (int): Heads; must divide ``dim``.
        qkv_bias (bool): Bias of the qkv projection. Default: True.
        proj (bool): Whether to own the qkv and output projections. InLine-CSwin
            keeps them in the block (shared by its branches) and calls
            :meth:`attend`. Default: True.
        lepe (bool): Add InLine-CSwin's depthwise 3x3 LePE of V. Default: False.
        num_prefix_tokens (int): Tokens before the ``H x W`` map (InLine-DeiT's class
            token): in the linear term, outside the local one. Default: 0.
        attn_drop (float): Dropout on the attention output before the projection.
            Default: 0.
        proj_drop (float): Dropout after the projection. Default: 0.
    """

    def __init__(self, dim: int, num_heads: int, qkv_bias: bool = True, proj: bool = True,
                 lepe: bool = False, num_prefix_tokens: int = 0, attn_drop: float = 0.,
                 proj_drop: float = 0.):
        super().__init__()
        if dim % num_heads:
            raise ValueError(f'dim ({dim}) must be divisible by num_heads ({num_heads})')
        self.dim = dim
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.num_prefix_tokens = num_prefix_tokens
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias) if proj else None
        # Predicts a 3x3 depthwise kernel per channel from the token mean.
        self.residual = nn.Sequential(
            nn.Conv1d(dim, dim, kernel_size=1, groups=num_heads),
            nn.GELU(),
            nn.Conv1d(dim, dim * 9, kernel_size=1, groups=num_heads))
        self.lepe = nn.Conv2d(dim, dim, 3, padding=1, groups=dim) if lepe else None
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim) if proj else None
        self.proj_drop = nn.Dropout(proj_drop)

    def extra_repr(self) -> str:
        prefix = f', num_prefix_tokens={self.num_prefix_tokens}' if self.num_prefix_tokens else ''
        return f'dim={self.dim}, num_heads={self.num_heads}{prefix}'

    def predict_kernels(self, token_mean: torch.Tensor) -> torch.Tensor:
        """``(B, C)`` token mean -> ``(B, C, 3, 3)`` depthwise kernels."""
        b = token_mean.shape[0]
        return self.residual(token_mean.unsqueeze(-1)).reshape(b, self.dim, 3, 3)

    def attend(self, qkv: torch.Tensor, hw: Tuple[int, int],
               token_mean: Optional[torch.Tensor] = None,
               valid: ValidMap = NO_PADDING) -> torch.Tensor:
        """Attention from precomputed ``qkv`` ``(B, N, 3C)``; returns ``(B, N, C)``
        before the projection.

        Args:
            qkv (Tensor): ``(B, N, 3C)`` queries, keys, values (in that order along
                the last axis, heads contiguous within each),
                ``N = num_prefix_tokens + H * W``. Not written.
            hw (tuple[int, int]): The map size.
            token_mean (Tensor): ``(B, C)`` mean the local kernels are predicted from
                (required here: it cannot be recovered from ``qkv``).
            valid (ValidMap): Each image's region of a padded batch (see the module
                docstring); the caller takes ``token_mean`` over it too.
        """
        return self._attend(qkv, hw, token_mean, valid, qkv_is_scratch=False)

    def _attend(self, qkv, hw, token_mean, valid, qkv_is_scratch: bool) -> torch.Tensor:
        if token_mean is None:
            raise ValueError(f'{type(self).__name__}.attend needs the (B, C) token mean the '
                             'local kernels are predicted from')
        if qkv.shape[-1] != 3 * self.dim:
            raise ValueError(f'qkv has {qkv.shape[-1]} channels, expected 3 * {self.dim}')
        kernels = self.predict_kernels(token_mean)
        bias = None
        if self.lepe is not None:
            # conv(V, k_pred) + conv(V, k_lepe) + b is one convolution with k_pred + k_lepe.
            kernels = kernels + self.lepe.weight.view(1, self.dim, 3, 3)
            bias = self.lepe.bias
        out = inline_qkv(qkv, self.num_heads, hw, self.scale, kernels, bias,
                         self.num_prefix_tokens, valid, qkv_is_scratch)
        return self.attn_drop(out)

    def forward(self, x: torch.Tensor, hw: Tuple[int, int],
                token_mean: Optional[torch.Tensor] = None,
                valid: ValidMap = NO_PADDING) -> torch.Tensor:
        """The call of the module docstring; ``token_mean`` defaults to the mean of
        ``x`` over each image's tokens (prefix included; InLine-CSwin passes the block
        input's mean to :meth:`attend` instead)."""
        if self.qkv is None:
            raise RuntimeError('InLineAttention(proj=False) has no projections: call '
                               'attend(qkv, hw, token_mean) with the block\'s qkv')
        if token_mean is None:
            token_mean = valid.mean(x)
        # The projection output is this call's own: the formula may zero it in place.
        out = self._attend(self.qkv(x), hw, token_mean, valid, qkv_is_scratch=True)
        return self.proj_drop(self.proj(out))
