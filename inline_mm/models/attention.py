"""The attentions of the InLine backbones, all called alike, and the plain reference.

Every attention here is an ``nn.Module`` called as ``attn(x, hw, token_mean=None)``
on ``(B, H*W, C)`` tokens of an ``hw = (H, W)`` map (``token_mean`` feeds InLine's
local kernels; the others ignore it); those that can run on a projection made
elsewhere (InLine-CSwin keeps qkv in its block) also offer
``attend(qkv, hw, token_mean=None)``. Constructors share ``(dim, num_heads, *,
qkv_bias, attn_drop, proj_drop)`` plus their own options. :data:`ATTENTIONS` names
them, so a block picks its attention from a table instead of branching.

InLine attention: injective linear attention plus a predicted local 3x3 term.

Han et al., "Bridging the Divide: Reconsidering Softmax and Linear Attention",
NeurIPS 2024 (arXiv 2412.06590).  For one head with ``n`` tokens, head dim ``d``
and scale ``s = d ** -0.5`` (identity kernel)::

    out_i = (s / n) q_i K^T V + (1 - s q_i mean(K)^T) mean(V)

The two terms fold into one product with the key/value covariance::

    out_i = q_i M + mean(V),   M = s Cov(K, V),   Cov(K, V) = K^T V / n - mean(K)^T mean(V)

InLine blocks add a depthwise 3x3 convolution of V laid out as the ``H x W`` map,
with a kernel predicted per sample from a token mean.

Implementation notes (why it looks the way it does):

* Everything runs in one autograd function, :class:`_InLineFunction`, with a
  hand-written backward.  Its gradient has a closed form in the same ``d x d``
  statistics (``dM = Q^T dO``; ``dK = (V - mean V) dCov^T / n``;
  ``dV = (K - mean K) dCov / n + colsum(dO) / n``), so the backward keeps only the
  packed ``qkv`` (alive anyway) and ``d x d`` matrices, makes the image copy of V
  again for the convolution instead of holding it through the forward, and writes
  ``dq``, ``dk``, ``dv`` straight into one buffer in the layout of the ``qkv``
  projection's output: no head-major copies, no zero-filled slice gradients summed
  afterwards.
* The per-head products read ``q``, ``k``, ``v`` as strided views of the packed
  projection output (BLAS takes the row stride), and write the output in token
  layout ``(B, N, C)`` that the output projection consumes.
* The local convolution runs per sample in channels-last layout: V copied once to
  ``(B, H, W, C)`` is a channels-last NCHW tensor, the convolution output is
  already in token layout, and the gradient of the token-layout output is a
  channels-last image without a copy.  oneDNN's depthwise kernels are several
  times faster in this layout, above all in the backward, than the
  ``(1, B * C, H, W)`` grouped convolution of the official code.
* Under ``torch.compile`` the same formula runs as plain differentiable tensor
  operations (:func:`_inline_traced`): the eager kernel's strided ``out=`` writes
  are what Dynamo cannot trace, and Inductor fuses and differentiates the plain
  form itself.
* Under ``torch.jit.trace`` and ONNX export (:func:`is_exporting`) the plain form
  runs with the local term as nine shifted multiply-adds over the whole batch
  (:func:`_depthwise3x3_batched`): the tracer cannot record the autograd function,
  and a per-sample loop would bake the batch size into the graph.
* Padding awareness (:mod:`.padding`) needs only per-sample token counts here: the
  caller zeroes q, k, v outside each image, so sums over all tokens are sums over
  the image's own, and the closed-form backward divides by the same counts; the
  local term then sees zeros past the image, as at the border of an image alone.
* The ``d x d`` statistics are reduced in fp32 even under autocast: their sum runs
  over every token of a high-resolution map, and a bounded mean (rather than a raw
  sum) in fp32 is what keeps fp16/bf16 from overflowing.  Token-wise products stay
  in the input dtype.
"""
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.layers import trunc_normal_

from .layers import round_up, window_merge, window_partition
from .padding import ValidMap, run_grouped

__all__ = ['INLINE', 'SOFTMAX', 'ATTENTIONS', 'inline_attention', 'local_residual', 'is_exporting',
           'InLineAttention', 'WindowAttention', 'GlobalSoftmaxAttention',
           'reference_inline_attention', 'reference_local_residual', 'reference_attention']

#: the two block types of ``stage_types``
INLINE, SOFTMAX = 'inline', 'softmax'

_F32 = torch.float32


def _autocast_off(t: torch.Tensor):
    return torch.autocast(device_type=t.device.type, enabled=False)


def _f32(t: torch.Tensor) -> torch.Tensor:
    return t if t.dtype == _F32 else t.float()


def _conv_cl(x: torch.Tensor) -> torch.Tensor:
    """``(B, H, W, C)`` -> the same memory as a channels-last ``(B, C, H, W)`` view."""
    return x.permute(0, 3, 1, 2)


def _v_image(v: torch.Tensor, hw: Tuple[int, int]) -> torch.Tensor:
    """``(B, heads, N, d)`` view of V -> contiguous ``(B, H, W, C)`` copy, returned as
    its channels-last ``(B, C, H, W)`` view."""
    b, heads, n, d = v.shape
    return _conv_cl(v.transpose(1, 2).reshape(b, hw[0], hw[1], heads * d))


class _InLineFunction(torch.autograd.Function):
    """InLine attention of a packed ``qkv`` view, optionally with the local term.

    Inputs: ``qkv`` ``(B, 3, heads, N, d)`` (any strides; the projection output
    ``(B, N, 3C)`` viewed without a copy), ``kernels`` ``(B, C, 3, 3)`` or None,
    ``bias`` ``(C,)`` or None (added with the local term), ``hw``, ``scale`` and
    ``counts``: None, or ``(B,)`` fp32 numbers of tokens each sample's means divide
    by (padding awareness: the caller zeroes q, k, v outside each image, so sums
    over all tokens are sums over the image's own). Output: ``(B, N, C)`` in token
    layout.
    """

    @staticmethod
    def forward(ctx, qkv, kernels, bias, hw, scale, counts=None):
        with _autocast_off(qkv):
            b, _, heads, n, d = qkv.shape
            c = heads * d
            dt = qkv.dtype
            q, k, v = qkv.unbind(1)                                         # (B, heads, N, d)
            # Tokens each sample's statistics are over: a number, or (B, 1, 1, 1).
            per = n if counts is None else counts.view(b, 1, 1, 1)
            means = qkv[:, 1:].sum(dim=3, keepdim=True, dtype=_F32).div_(
                per if counts is None else per.unsqueeze(1))
            k_mean, v_mean = means.unbind(1)                                # (B, heads, 1, d)

            cov = qkv.new_empty((b, heads, d, d), dtype=_F32)
            for i in range(b):
                # In fp32 this reads the strided views directly; in fp16/bf16 the
                # per-sample fp32 copy keeps the reduction exact and bounded.
                torch.bmm(_f32(k[i]).transpose(1, 2), _f32(v[i]), out=cov[i])
            cov.div_(per).sub_(k_mean.transpose(-2, -1) @ v_mean)
            m = cov.mul_(scale).to(dt)                                      # (B, heads, d, d)

            out = qkv.new_empty((b, n, c))
            out_h = out.view(b, n, heads, d).transpose(1, 2)                # (B, heads, N, d)
            if kernels is None:
                for i in range(b):
                    torch.baddbmm(v_mean[i].to(dt), q[i], m[i], out=out_h[i])
            else:
                for i in range(b):
                    torch.bmm(q[i], m[i], out=out_h[i])
                kernels = kernels.to(dt).reshape(b, c, 1, 3, 3)
                # mean(V) (and the LePE bias) ride along as the convolution bias.
                conv_bias = v_mean.reshape(b, c)
                if bias is not None:
                    conv_bias = conv_bias + bias.to(_F32)
                conv_bias = conv_bias.to(dt)
                x_img = _v_image(v, hw)
                for i in range(b):
                    local = F.conv2d(x_img[i:i + 1], kernels[i], conv_bias[i], padding=1, groups=c)
                    out[i].add_(local.permute(0, 2, 3, 1).reshape(n, c))
        # The image copy of V is not kept: the backward makes it again (one copy)
        # rather than holding N x C per block for the whole forward pass.
        ctx.save_for_backward(qkv, m, means, kernels, counts)
        ctx.scale, ctx.hw, ctx.has_bias = scale, hw, bias is not None
        return out

    @staticmethod
    def backward(ctx, grad):
        qkv, m, means, kernels, counts = ctx.saved_tensors
        need_qkv, need_kernels, need_bias = ctx.needs_input_grad[:3]
        scale = ctx.scale
        with _autocast_off(qkv):
            b, _, heads, n, d = qkv.shape
            c = heads * d
            dt = qkv.dtype
            grad = grad.contiguous()
            q, k, v = qkv.unbind(1)
            grad_sum = grad.sum(dim=1, dtype=_F32)                          # (B, C)
            grad_qkv = grad_kernels = grad_bias = None

            # Local term first, so that its N x C temporaries are gone before the
            # 3 N x C gradient buffer exists.
            grad_local = None
            if kernels is not None and (need_qkv or need_kernels):
                h, w = ctx.hw
                grad_img = _conv_cl(grad.view(b, h, w, c))
                x_img = _v_image(v, ctx.hw)
                grad_local, dk_list = [], []
                for i in range(b):
                    dx, dw, _ = torch.ops.aten.convolution_backward(
                        grad_img[i:i + 1], x_img[i:i + 1], kernels[i], None, [1, 1], [1, 1],
                        [1, 1], False, [0, 0], c, [need_qkv, need_kernels, False])
                    grad_local.append(dx)
                    if need_kernels:
                        dk_list.append(dw.view(c, 3, 3))
                del x_img
                if need_kernels:
                    grad_kernels = torch.stack(dk_list)

            if need_qkv:
                k_mean, v_mean = means.unbind(1)
                grad_h = grad.view(b, n, heads, d).transpose(1, 2)          # (B, heads, N, d)
                # dM = Q^T dO and dCov = s dM, per sample in fp32.
                dcov = qkv.new_empty((b, heads, d, d), dtype=_F32)
                for i in range(b):
                    torch.bmm(_f32(q[i]).transpose(1, 2), _f32(grad_h[i]), out=dcov[i])
                if counts is None:
                    per = n
                    dcov_n = dcov.mul_(scale / n)                            # dCov / n
                else:
                    per = counts.view(b, 1, 1, 1)
                    dcov_n = dcov.mul_(scale).div_(per)
                # The mean terms of dK and dV reduce to per-sample row offsets.
                off_k = -(v_mean @ dcov_n.transpose(-2, -1))
                off_v = grad_sum.view(b, heads, 1, d).div(per) - k_mean @ dcov_n
                dcov_n = dcov_n.to(dt)
                off_k, off_v = off_k.to(dt), off_v.to(dt)

                # Written in the (B, N, 3, heads, d) layout of the projection output.
                grad_tok = qkv.new_empty((b, n, 3, heads, d))
                grad_qkv = grad_tok.permute(0, 2, 3, 1, 4)                  # (B, 3, heads, N, d)
                dq, dk, dv = grad_qkv.unbind(1)
                for i in range(b):
                    torch.bmm(grad_h[i], m[i].transpose(1, 2), out=dq[i])
                    torch.baddbmm(off_k[i], v[i], dcov_n[i].transpose(1, 2), out=dk[i])
                    torch.baddbmm(off_v[i], k[i], dcov_n[i], out=dv[i])
                    if grad_local is not None:
                        dx = grad_local[i]
                        grad_local[i] = None
                        grad_tok[i, :, 2].view(n, c).add_(dx.permute(0, 2, 3, 1).reshape(n, c))
            if need_bias and ctx.has_bias:
                grad_bias = grad_sum.sum(0)
        return grad_qkv, grad_kernels, grad_bias, None, None, None


def _depthwise3x3_batched(x_img: torch.Tensor, kernels: torch.Tensor) -> torch.Tensor:
    """Depthwise 3x3 convolution, zero padding 1, with a kernel per sample, without a
    loop over the batch: nine shifted multiply-adds.

    ``x_img`` ``(B, C, H, W)``, ``kernels`` ``(B, C, 3, 3)`` -> ``(B, C, H, W)``.  A
    tracer records the batch as a free dimension here (a per-sample loop would bake
    it in), and ONNX gets plain Pad/Slice/Mul/Add nodes.
    """
    h, w = x_img.shape[-2:]
    xp = F.pad(x_img, (1, 1, 1, 1))
    out = None
    for dy in range(3):
        for dx in range(3):
            term = xp[:, :, dy:dy + h, dx:dx + w] * kernels[:, :, dy, dx, None, None]
            out = term if out is None else out + term
    return out


def _inline_traced(qkv, kernels, bias, hw, scale, counts=None, batched_local=False):
    """:class:`_InLineFunction`'s forward as differentiable ops: for ``torch.compile``
    and, with ``batched_local`` (no loop over samples), for ``torch.jit.trace`` and
    ONNX export."""
    b, _, heads, n, d = qkv.shape
    c = heads * d
    q, k, v = qkv.unbind(1)
    with _autocast_off(qkv):
        kf, vf = _f32(k), _f32(v)
        if counts is None:
            per = n
            k_mean, v_mean = kf.mean(dim=2, keepdim=True), vf.mean(dim=2, keepdim=True)
        else:
            per = counts.view(b, 1, 1, 1)
            k_mean, v_mean = kf.sum(dim=2, keepdim=True) / per, vf.sum(dim=2, keepdim=True) / per
        cov = kf.transpose(-2, -1) @ vf / per - k_mean.transpose(-2, -1) @ v_mean
        m = (cov * scale).to(q.dtype)
        out = (q @ m).transpose(1, 2).reshape(b, n, c)
        shift = v_mean.reshape(b, 1, c)
        if bias is not None:
            shift = shift + bias.to(_F32)
        out = out + shift.to(out.dtype)
        if kernels is not None:
            h, w = hw
            x_img = _conv_cl(v.transpose(1, 2).reshape(b, h, w, c))
            if batched_local:
                local = _depthwise3x3_batched(x_img, kernels.to(out.dtype).reshape(b, c, 3, 3))
            else:
                kernels = kernels.to(out.dtype).reshape(b, c, 1, 3, 3)
                local = torch.cat([F.conv2d(x_img[i:i + 1], kernels[i], padding=1, groups=c)
                                   for i in range(b)])
            out = out + local.permute(0, 2, 3, 1).reshape(b, n, c)
    return out


def is_exporting() -> bool:
    """Whether a graph is being recorded by ``torch.jit.trace`` or the TorchScript ONNX
    exporter (their tracer cannot record the hand-written autograd function)."""
    return torch.jit.is_tracing() or torch.onnx.is_in_onnx_export()


def _inline(qkv, kernels, bias, hw, scale, counts=None):
    """Dispatch: the hand-written kernel in eager mode, plain ops when compiling,
    loop-free plain ops when tracing or exporting. ``counts``: see
    :class:`_InLineFunction`."""
    if is_exporting():
        return _inline_traced(qkv, kernels, bias, hw, scale, counts, batched_local=True)
    if torch.compiler.is_compiling():
        return _inline_traced(qkv, kernels, bias, hw, scale, counts)
    return _InLineFunction.apply(qkv, kernels, bias, hw, scale, counts)


def inline_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     scale: Optional[float] = None) -> torch.Tensor:
    """Injective linear attention (identity kernel) over all tokens, without the
    local term (Han et al., NeurIPS 2024, eq. 5 with the scale ``s / n``).

    Args:
        q, k, v (Tensor): ``(B, heads, N, d)``.
        scale (float, optional): ``s`` in the formula. Defaults to ``d ** -0.5``.

    Returns:
        Tensor: ``(B, heads, N, d)`` (a view of a token-layout ``(B, N, heads * d)``
        tensor) in the common dtype of the inputs.
    """
    if not (q.shape == k.shape == v.shape) or q.dim() != 4:
        raise ValueError(f'q, k, v must share one (B, heads, N, d) shape, got '
                         f'{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}')
    b, heads, n, d = q.shape
    if scale is None:
        scale = d ** -0.5
    out = _inline(torch.stack((q, k, v), dim=1), None, None, None, scale)
    return out.view(b, n, heads, d).transpose(1, 2)


def local_residual(v_img: torch.Tensor, kernels: torch.Tensor) -> torch.Tensor:
    """Depthwise 3x3 convolution with a different kernel for every sample.

    Runs per sample in channels-last layout (see the module notes); the result is
    returned as a contiguous NCHW tensor (some mmcv ops misread channels-last views).

    Args:
        v_img (Tensor): ``(B, C, H, W)``.
        kernels (Tensor): ``(B, C, 3, 3)``.

    Returns:
        Tensor: ``(B, C, H, W)``, zero padding 1.
    """
    b, c = v_img.shape[:2]
    if kernels.shape != (b, c, 3, 3):
        raise ValueError(f'kernels must be (B, C, 3, 3) = {(b, c, 3, 3)}, got {tuple(kernels.shape)}')
    if is_exporting():
        return _depthwise3x3_batched(v_img, kernels.to(v_img.dtype))
    x = v_img.contiguous(memory_format=torch.channels_last)
    kernels = kernels.to(x.dtype).unsqueeze(2)
    out = torch.cat([F.conv2d(x[i:i + 1], kernels[i], padding=1, groups=c) for i in range(b)])
    return out.contiguous()


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
               token_mean: Optional[torch.Tensor] = None,
               valid: Optional[ValidMap] = None) -> torch.Tensor:
        """Attention from precomputed ``qkv`` ``(B, N, 3C)``; returns ``(B, N, C)``
        before the projection.

        Args:
            qkv (Tensor): ``(B, N, 3C)`` queries, keys, values (in that order along
                the last axis, heads contiguous within each).
            hw (tuple[int, int]): The map size, ``H * W == N``.
            token_mean (Tensor): ``(B, C)`` mean the local kernels are predicted from
                (required here: it cannot be recovered from ``qkv``).
            valid (ValidMap, optional): Each image's region of a padded batch: the
                statistics run over it only and the local term sees zeros outside it
                (the caller takes ``token_mean`` over it too). Keys and values are
                zeroed outside it in place (pass the projection's own output); queries
                there only make outputs there, which the caller ignores.
        """
        if token_mean is None:
            raise ValueError('InLineAttention.attend needs the (B, C) token mean the local '
                             'kernels are predicted from')
        b, n, c3 = qkv.shape
        h, w = hw
        if h * w != n:
            raise ValueError(f'{n} tokens do not form a {h}x{w} map')
        if c3 != 3 * self.dim:
            raise ValueError(f'qkv has {c3} channels, expected 3 * {self.dim}')
        kernels = self.predict_kernels(token_mean)
        bias = None
        if self.lepe is not None:
            # conv(V, k_pred) + conv(V, k_lepe) + b is one convolution with k_pred + k_lepe.
            kernels = kernels + self.lepe.weight.view(1, self.dim, 3, 3)
            bias = self.lepe.bias
        counts = None
        if valid is not None:
            valid.zero_(qkv[..., self.dim:])                                # K and V
            counts = valid.counts
        packed = qkv.reshape(b, n, 3, self.num_heads, self.head_dim).permute(0, 2, 3, 1, 4)
        out = _inline(packed, kernels, bias, (h, w), self.scale, counts)
        return self.attn_drop(out)

    def forward(self, x: torch.Tensor, hw: Tuple[int, int],
                token_mean: Optional[torch.Tensor] = None,
                valid: Optional[ValidMap] = None) -> torch.Tensor:
        """
        Args:
            x (Tensor): ``(B, N, C)`` tokens of an ``hw = (H, W)`` map, row-major.
            hw (tuple[int, int]): The map size.
            token_mean (Tensor, optional): ``(B, C)`` mean the local kernels are
                predicted from. Defaults to the mean of ``x`` over each image's
                tokens (InLine-Swin/PVT); InLine-CSwin passes the block input's mean.
            valid (ValidMap, optional): Each image's region of a padded batch.

        Returns:
            Tensor: ``(B, N, C)``.
        """
        if self.qkv is None:
            raise RuntimeError('InLineAttention(proj=False) has no projections: call '
                               'attend(qkv, hw, token_mean) with the block\'s qkv')
        if token_mean is None:
            token_mean = x.mean(dim=1) if valid is None else valid.mean(x)
        out = self.attend(self.qkv(x), hw, token_mean, valid)
        return self.proj_drop(self.proj(out))


# ----------------------------------------------------------------------------- softmax
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
    valid = torch.roll(valid, -shift, 0) if shift else valid
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
        shift (bool): Shift the windows by half a window (Swin's odd blocks).
            Default: False.
        qkv_bias (bool): Default: True.
        attn_drop (float): Dropout on attention weights. Default: 0.
        proj_drop (float): Dropout after the projection. Default: 0.
    """

    def __init__(self, dim: int, num_heads: int, window_size: int = 7, shift: bool = False,
                 qkv_bias: bool = True, attn_drop: float = 0., proj_drop: float = 0.):
        super().__init__()
        if dim % num_heads:
            raise ValueError(f'dim ({dim}) must be divisible by num_heads ({num_heads})')
        self.dim, self.num_heads, self.window_size = dim, num_heads, window_size
        self.shift = shift
        self.scale = (dim // num_heads) ** -0.5
        self.relative_position_bias_table = nn.Parameter(
            torch.zeros((2 * window_size - 1) ** 2, num_heads))
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)
        trunc_normal_(self.relative_position_bias_table, std=.02)

    def extra_repr(self) -> str:
        return (f'dim={self.dim}, num_heads={self.num_heads}, window_size={self.window_size}, '
                f'shift={self.shift}')

    def _relative_bias(self, wh: int, ww: int) -> torch.Tensor:
        ws = self.window_size
        dev = self.relative_position_bias_table.device
        ys, xs = torch.meshgrid(torch.arange(wh, device=dev), torch.arange(ww, device=dev),
                                indexing='ij')
        ys, xs = ys.flatten(), xs.flatten()
        index = (ys[:, None] - ys[None, :] + ws - 1) * (2 * ws - 1) + (xs[:, None] - xs[None, :] + ws - 1)
        bias = self.relative_position_bias_table[index.flatten()]
        return bias.view(wh * ww, wh * ww, -1).permute(2, 0, 1)          # (heads, N, N)

    def layout(self, hw: Tuple[int, int]) -> Tuple[int, int, int, int]:
        """Window ``(wh, ww)`` and shift ``(sh, sw)`` for a map (or image region) of
        size ``hw``: a side that fits in one window is one unshifted window of it."""
        h, w = hw
        ws = self.window_size
        sh = ws // 2 if self.shift and h > ws else 0
        sw = ws // 2 if self.shift and w > ws else 0
        return min(ws, h), min(ws, w), sh, sw

    def forward(self, x: torch.Tensor, hw: Tuple[int, int],
                token_mean: Optional[torch.Tensor] = None,
                valid: Optional[ValidMap] = None) -> torch.Tensor:
        """``x``: ``(B, H*W, C)``; ``token_mean`` is not used. Returns ``(B, H*W, C)``.

        With ``valid`` (the images' regions of a padded batch), each image gets the
        windows and shift it would get alone (:meth:`layout` of its own size; images
        that differ run separately) and keys outside it are masked.
        """
        b, n, c = x.shape
        h, w = hw
        if valid is None:
            return self._windows(x.view(b, h, w, c), self.layout(hw)).reshape(b, n, c)
        x = valid.zero(x).view(b, h, w, c)
        keys = valid.pixels

        def attend(xs, layout, idx):
            return self._windows(xs, layout, keys[idx] if len(idx) < b else keys)

        return run_grouped(attend, x, valid, self.layout).reshape(b, n, c)

    def _windows(self, x: torch.Tensor, layout: Tuple[int, int, int, int],
                 keys: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``(B, H, W, C)`` -> ``(B, H, W, C)`` attention in the windows of ``layout``;
        ``keys`` ``(B, H, W)`` bool marks the positions that may be attended to."""
        b, h, w, c = x.shape
        wh, ww, sh, sw = layout
        hp, wp = round_up(h, wh), round_up(w, ww)
        if hp != h or wp != w:
            x = F.pad(x, (0, 0, 0, wp - w, 0, hp - h))
        if sh or sw:
            x = torch.roll(x, shifts=(-sh, -sw), dims=(1, 2))
        windows = window_partition(x, wh, ww)                            # (B*nW, N, C)

        bw, nt, _ = windows.shape
        qkv = self.qkv(windows).reshape(bw, nt, 3, self.num_heads, c // self.num_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        attn = attn + self._relative_bias(wh, ww).unsqueeze(0).to(attn.dtype)
        mask = self._mask(h, w, hp, wp, wh, ww, sh, sw, x.device)
        if keys is not None:
            # Each image's padding is masked like the shift regions (-100).
            keys = F.pad(keys, (0, wp - w, 0, hp - h))
            if sh or sw:
                keys = torch.roll(keys, shifts=(-sh, -sw), dims=(1, 2))
            blocked = ~window_partition(keys[..., None], wh, ww).view(b, -1, 1, nt)
            pad_mask = torch.zeros(blocked.shape, device=x.device).masked_fill_(blocked, -100.0)
            mask = pad_mask if mask is None else mask[None] + pad_mask     # (B, nW, N, N)
        elif mask is not None:
            mask = mask[None]
        if mask is not None:
            nw = mask.shape[1]
            attn = attn.view(bw // nw, nw, self.num_heads, nt, nt) + mask[:, :, None].to(attn.dtype)
            attn = attn.view(bw, self.num_heads, nt, nt)
        attn = self.attn_drop(attn.softmax(dim=-1))
        out = (attn @ v).transpose(1, 2).reshape(bw, nt, c)
        out = self.proj_drop(self.proj(out))

        out = window_merge(out, wh, ww, hp, wp)
        if sh or sw:
            out = torch.roll(out, shifts=(sh, sw), dims=(1, 2))
        return out[:, :h, :w]

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
        win = window_partition(label[None, :, :, None], wh, ww).squeeze(-1)  # (nW, N)
        blocked = (win[:, None, :] != win[:, :, None]) | (win[:, None, :] < 0)
        return torch.zeros(blocked.shape, device=device).masked_fill_(blocked, -100.0)


class GlobalSoftmaxAttention(nn.Module):
    """Softmax attention over all ``H * W`` tokens (multi-head, no position bias): what
    InLine's global attention replaces, at quadratic cost (the benchmark's baseline).

    Args:
        dim (int): Channels.
        num_heads (int): Heads.
        qkv_bias (bool): Default: True.
        attn_drop (float): Dropout on attention weights. Default: 0.
        proj_drop (float): Dropout after the projection. Default: 0.
    """

    def __init__(self, dim: int, num_heads: int, qkv_bias: bool = True, attn_drop: float = 0.,
                 proj_drop: float = 0.):
        super().__init__()
        if dim % num_heads:
            raise ValueError(f'dim ({dim}) must be divisible by num_heads ({num_heads})')
        self.dim, self.num_heads = dim, num_heads
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = attn_drop
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def extra_repr(self) -> str:
        return f'dim={self.dim}, num_heads={self.num_heads}'

    def forward(self, x: torch.Tensor, hw: Tuple[int, int],
                token_mean: Optional[torch.Tensor] = None,
                valid: Optional[ValidMap] = None) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        # Keys outside each image are masked (every image has a valid key: no empty row).
        mask = None if valid is None else valid.mask.view(b, 1, 1, n)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=self.attn_drop if self.training else 0.)
        return self.proj_drop(self.proj(out.transpose(1, 2).reshape(b, n, c)))


#: attention by name; a family maps its block types (``'inline'``, ``'softmax'``) to
#: these or to its own classes with the same call signature.
ATTENTIONS = {'inline': InLineAttention, 'window': WindowAttention,
              'global': GlobalSoftmaxAttention}


# --------------------------------------------------------------------------- reference
# The formula of Han et al. (NeurIPS 2024, arXiv 2412.06590, eq. 5 with the ``s / n``
# scale of the official code), written term by term with autograd doing the backward:
# what the tests hold the fast kernel to, and what python -m benchmarks times it against.

def reference_inline_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                               scale: float) -> torch.Tensor:
    """``(B, heads, N, d)`` -> ``(B, heads, N, d)``:
    ``(s / n) q_i K^T V + (1 - s q_i mean(K)^T) mean(V)``."""
    n = k.shape[-2]
    k_mean = k.mean(dim=-2, keepdim=True)
    v_mean = v.mean(dim=-2, keepdim=True)
    return (scale / n) * (q @ (k.transpose(-2, -1) @ v)) \
        + (1 - scale * (q @ k_mean.transpose(-2, -1))) * v_mean


def reference_local_residual(v_img: torch.Tensor, kernels: torch.Tensor) -> torch.Tensor:
    """Per-sample depthwise 3x3 convolution as the official code writes it: the batch
    folded into the channels of one grouped convolution, zero padding 1."""
    b, c, h, w = v_img.shape
    out = F.conv2d(v_img.reshape(1, b * c, h, w), kernels.reshape(b * c, 1, 3, 3),
                   padding=1, groups=b * c)
    return out.reshape(b, c, h, w)


def reference_attention(attn: InLineAttention, x: Optional[torch.Tensor] = None,
                        hw: Optional[Tuple[int, int]] = None,
                        token_mean: Optional[torch.Tensor] = None,
                        qkv: Optional[torch.Tensor] = None) -> torch.Tensor:
    """What :class:`InLineAttention` computes, from its parameters and the reference
    functions: ``forward(x, hw, token_mean)``, or ``attend(qkv, hw, token_mean)``
    when ``qkv`` is given."""
    if qkv is None:
        qkv = attn.qkv(x)
        token_mean = x.mean(dim=1) if token_mean is None else token_mean
    b, n, _ = qkv.shape
    c, heads, d = attn.dim, attn.num_heads, attn.head_dim
    h, w = hw
    q, k, v = qkv.reshape(b, n, 3, heads, d).permute(2, 0, 3, 1, 4)
    out = reference_inline_attention(q, k, v, attn.scale).transpose(1, 2).reshape(b, n, c)
    v_img = v.transpose(1, 2).reshape(b, h, w, c).permute(0, 3, 1, 2)
    kernels = attn.residual(token_mean.unsqueeze(-1)).reshape(b, c, 3, 3)
    local = reference_local_residual(v_img, kernels)
    if attn.lepe is not None:
        local = local + attn.lepe(v_img)
    out = out + local.flatten(2).transpose(1, 2)
    return out if attn.proj is None else attn.proj(out)
