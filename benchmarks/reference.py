"""InLine attention written out term by term: what the tests hold both forms of the
package (``inline_mm.models.inline_function``) to, and what ``python -m benchmarks
--attention`` times them against.

The formula of Han et al., "Bridging the Divide: Reconsidering Softmax and Linear
Attention" (NeurIPS 2024, arXiv 2412.06590, eq. 5 with the ``s / n`` scale of the
official code), with autograd doing the backward, and the local term as the official
code computes it (the batch folded into the channels of one grouped convolution).
Not part of the package: nothing a user runs goes through it.
"""
from typing import Optional, Tuple

import torch
import torch.nn.functional as F

__all__ = ['inline_attention', 'local_residual', 'attention']


def inline_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     scale: float) -> torch.Tensor:
    """``(B, heads, N, d)`` -> ``(B, heads, N, d)``:
    ``(s / n) q_i K^T V + (1 - s q_i mean(K)^T) mean(V)``."""
    n = k.shape[-2]
    k_mean = k.mean(dim=-2, keepdim=True)
    v_mean = v.mean(dim=-2, keepdim=True)
    return (scale / n) * (q @ (k.transpose(-2, -1) @ v)) \
        + (1 - scale * (q @ k_mean.transpose(-2, -1))) * v_mean


def local_residual(v_img: torch.Tensor, kernels: torch.Tensor) -> torch.Tensor:
    """Per-sample depthwise 3x3 convolution as the official code writes it: the batch
    folded into the channels of one grouped convolution, zero padding 1."""
    b, c, h, w = v_img.shape
    out = F.conv2d(v_img.reshape(1, b * c, h, w), kernels.reshape(b * c, 1, 3, 3),
                   padding=1, groups=b * c)
    return out.reshape(b, c, h, w)


def attention(attn, x: torch.Tensor, hw: Tuple[int, int],
              token_mean: Optional[torch.Tensor] = None,
              projection: Optional[torch.nn.Module] = None) -> torch.Tensor:
    """What an ``InLineAttention`` ``attn`` (released settings: InLine, identity kernel,
    global) computes for ``attn(x, hw, token_mean, projection=projection)``, from its
    parameters and the functions above."""
    qkv = (attn.qkv if projection is None else projection)(x)
    token_mean = x.mean(dim=1) if token_mean is None else token_mean
    b, n, _ = qkv.shape
    c, heads, d, p = attn.dim, attn.num_heads, attn.head_dim, attn.num_prefix_tokens
    h, w = hw
    q, k, v = qkv.reshape(b, n, 3, heads, d).permute(2, 0, 3, 1, 4)
    out = inline_attention(q, k, v, attn.scale).transpose(1, 2).reshape(b, n, c)
    v_img = v[:, :, p:].transpose(1, 2).reshape(b, h, w, c).permute(0, 3, 1, 2)
    if attn.residual is not None:
        kernels = attn.residual(token_mean.unsqueeze(-1)).reshape(b, c, 3, 3)
        local = local_residual(v_img, kernels)
    else:
        local = torch.zeros_like(v_img)
    if attn.lepe is not None:
        local = local + attn.lepe(v_img)
    out = torch.cat([out[:, :p], out[:, p:] + local.flatten(2).transpose(1, 2)], dim=1)
    return out if attn.proj is None else attn.proj(out)
