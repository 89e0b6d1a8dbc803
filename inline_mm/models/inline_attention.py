"""InLine attention: injective linear attention plus a predicted local 3x3 term.

Han et al., "Bridging the Divide: Reconsidering Softmax and Linear Attention",
NeurIPS 2024 (arXiv 2412.06590).  For one head with ``n`` tokens, head dim ``d``
and scale ``s = d ** -0.5`` (identity kernel)::

    out_i = (s / n) q_i K^T V + (1 - s q_i mean(K)^T) mean(V)

The two terms fold into one product with the key/value covariance::

    out_i = s q_i Cov(K, V) + mean(V),   Cov(K, V) = K^T V / n - mean(K)^T mean(V)

which is what :func:`inline_attention` computes.  The ``d x d`` statistics are
reduced in fp32 even under autocast: their sum runs over every token of a
high-resolution map, and a bounded mean (rather than a raw sum) in fp32 is what
keeps fp16/bf16 from overflowing.  The token-wise products stay in the autocast
dtype.
"""
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ['inline_attention', 'local_residual', 'InLineAttention']


def _autocast_off(t: torch.Tensor):
    return torch.autocast(device_type=t.device.type, enabled=False)


def inline_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     scale: Optional[float] = None) -> torch.Tensor:
    """Injective linear attention (identity kernel) over all tokens.

    Args:
        q, k, v (Tensor): ``(B, heads, N, d)``.
        scale (float, optional): ``s`` in the formula. Defaults to ``d ** -0.5``.

    Returns:
        Tensor: ``(B, heads, N, d)`` in the dtype of ``q`` (autocast-aware).
    """
    n, d = k.shape[-2], k.shape[-1]
    if scale is None:
        scale = d ** -0.5
    with _autocast_off(k):
        kf, vf = k.float(), v.float()
        k_mean = kf.mean(dim=-2, keepdim=True)          # (B, h, 1, d)
        v_mean = vf.mean(dim=-2, keepdim=True)          # (B, h, 1, d)
        # Cov(K, V) scaled by s: the mean over tokens is bounded by the activations,
        # so it is safe in any dtype once taken.
        kv = torch.matmul(kf.transpose(-2, -1), vf).div_(n)
        kv = kv.sub_(k_mean.transpose(-2, -1) * v_mean).mul_(scale)
    out = torch.matmul(q, kv.to(q.dtype))
    return out + v_mean.to(out.dtype)


def local_residual(v_img: torch.Tensor, kernels: torch.Tensor) -> torch.Tensor:
    """Depthwise 3x3 convolution with a different kernel for every sample.

    Args:
        v_img (Tensor): ``(B, C, H, W)``.
        kernels (Tensor): ``(B, C, 3, 3)``.

    Returns:
        Tensor: ``(B, C, H, W)``, zero padding 1.
    """
    b, c, h, w = v_img.shape
    # Folding the batch into the channel axis makes it one grouped conv call.
    out = F.conv2d(v_img.reshape(1, b * c, h, w), kernels.reshape(b * c, 1, 3, 3).to(v_img.dtype),
                   padding=1, groups=b * c)
    return out.reshape(b, c, h, w)


class InLineAttention(nn.Module):
    """InLine attention over a whole ``H x W`` token map.

    Parameter names follow the official code (``qkv``, ``proj``, ``residual.{0,2}``;
    optional ``lepe`` for InLine-CSwin's locally enhanced positional term).

    Args:
        dim (int): Channels ``C``.
        num_heads (int): Heads; must divide ``dim``.
        qkv_bias (bool): Bias of the qkv projection. Default: True.
        proj (bool): Whether to own the output projection. InLine-CSwin keeps the
            projection in the block (shared by its branches). Default: True.
        lepe (bool): Add InLine-CSwin's depthwise 3x3 LePE of V. Default: False.
        attn_drop (float): Dropout on the attention output before the projection.
            Default: 0.
        proj_drop (float): Dropout after the projection. Default: 0.
    """

    def __init__(self, dim: int, num_heads: int, qkv_bias: bool = True, proj: bool = True,
                 lepe: bool = False, attn_drop: float = 0., proj_drop: float = 0.):
        super().__init__()
        if dim % num_heads:
            raise ValueError(f'dim ({dim}) must be divisible by num_heads ({num_heads})')
        self.dim = dim
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim ** -0.5
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
        return f'dim={self.dim}, num_heads={self.num_heads}'

    def predict_kernels(self, token_mean: torch.Tensor) -> torch.Tensor:
        """``(B, C)`` token mean -> ``(B, C, 3, 3)`` depthwise kernels."""
        b = token_mean.shape[0]
        return self.residual(token_mean.unsqueeze(-1)).reshape(b, self.dim, 3, 3)

    def attend(self, qkv: torch.Tensor, hw: Tuple[int, int],
               token_mean: torch.Tensor) -> torch.Tensor:
        """Attention from precomputed ``qkv`` ``(B, N, 3C)``; returns ``(B, N, C)``
        before the projection."""
        b, n, _ = qkv.shape
        h, w = hw
        if h * w != n:
            raise ValueError(f'{n} tokens do not form a {h}x{w} map')
        q, k, v = qkv.view(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        out = inline_attention(q, k, v, self.scale)                     # (B, h, N, d)
        out = out.transpose(1, 2).reshape(b, n, self.dim)
        v_img = v.transpose(1, 2).reshape(b, h, w, self.dim).permute(0, 3, 1, 2)
        local = local_residual(v_img, self.predict_kernels(token_mean))
        if self.lepe is not None:
            local = local + self.lepe(v_img)
        out = out + local.flatten(2).transpose(1, 2).to(out.dtype)
        return self.attn_drop(out)

    def forward(self, x: torch.Tensor, hw: Tuple[int, int],
                token_mean: Optional[torch.Tensor] = None) -> torch.Tensor:
        """
        Args:
            x (Tensor): ``(B, N, C)`` tokens of an ``hw = (H, W)`` map, row-major.
            hw (tuple[int, int]): The map size.
            token_mean (Tensor, optional): ``(B, C)`` mean the local kernels are
                predicted from. Defaults to ``x.mean(1)`` (InLine-Swin/PVT);
                InLine-CSwin passes the block input's mean.

        Returns:
            Tensor: ``(B, N, C)``.
        """
        if token_mean is None:
            token_mean = x.mean(dim=1)
        out = self.attend(self.qkv(x), hw, token_mean)
        return self.proj_drop(self.proj(out))
