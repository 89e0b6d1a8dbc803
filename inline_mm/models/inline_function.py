"""The InLine formula, in one place: its two forms (the per-sample kernel and the plain
batched form), the dispatch between them, and the term-by-term reference the tests
hold them to.

InLine attention: injective linear attention plus a predicted local 3x3 term.

Han et al., "Bridging the Divide: Reconsidering Softmax and Linear Attention",
NeurIPS 2024 (arXiv 2412.06590).  For one head with ``n`` tokens, head dim ``d``
and scale ``s = d ** -0.5`` (identity kernel)::

    out_i = (s / n) q_i K^T V + (1 - s q_i mean(K)^T) mean(V)

The two terms fold into one product with the key/value covariance::

    out_i = q_i M + mean(V),   M = s Cov(K, V),   Cov(K, V) = K^T V / n - mean(K)^T mean(V)

InLine blocks add a depthwise 3x3 convolution of V laid out as the ``H x W`` map,
with a kernel predicted per sample from a token mean. A plain ViT (InLine-DeiT) has
``num_prefix_tokens`` tokens before the map (the class token): they take part in the
linear term, and the local term convolves and adds to the map's tokens only.

Implementation notes (why it looks the way it does):

* Everything runs in one autograd function, :class:`_InLineFunction`, with a
  hand-written backward.  Its gradient has a closed form in the same ``d x d``
  statistics (``dM = Q^T dO``; ``dK = (V - mean V) dCov^T / n``;
  ``dV = (K - mean K) dCov / n + colsum(dO) / n``), so the backward keeps only the
  packed ``qkv`` (alive anyway) and ``d x d`` matrices, makes the copy of V again
  for the convolution instead of holding it through the forward, and writes
  ``dq``, ``dk``, ``dv`` straight into one buffer in the layout of the ``qkv``
  projection's output: no head-major copies, no zero-filled slice gradients summed
  afterwards.
* The per-head products read ``q``, ``k``, ``v`` as strided views of the packed
  projection output (BLAS takes the row stride), and write the output in token
  layout ``(B, N, C)`` that the output projection consumes.
* The local convolution runs per sample in channels-last layout: V copied once into
  a dense token-layout ``(B, N, C)`` buffer is, as ``(B, H, W, C)``, a channels-last
  NCHW image (the same buffer feeds ``K^T V``), the convolution output is already in
  token layout, and the gradient of the token-layout output is a channels-last image
  without a copy.  oneDNN's depthwise kernels are several
  times faster in this layout, above all in the backward, than the
  ``(1, B * C, H, W)`` grouped convolution of the official code.
* Two forms, one per path (:mod:`.padding`, "two paths"). The **per-sample kernel**
  (:class:`_InLineFunction`) above loops over the images with their sizes known on
  the host: fastest on a CPU. The **plain form** (:func:`plain_qkv`,
  :func:`plain_attention`) is the same formula as differentiable tensor operations
  batched over (B x heads), with masks and per-image counts for the padding and the
  local term as one :func:`depthwise3x3`: no loop over the batch and no host read.
  It is what the batched path (every device but the CPU by default), ``torch.compile``
  (Dynamo cannot trace the kernel's strided ``out=`` writes), ``torch.jit.trace``/ONNX
  export (:func:`is_exporting`: a tracer cannot record the autograd function, and a
  loop would bake the batch size in) and the paper's switches (a kernel phi, linear
  attention, windows) run. InLine attention with another kernel on the per-sample
  path still runs the kernel, on ``phi(q), phi(k), v``.
* The fold (:class:`_FoldedInLineFunction`, :func:`inline_folded`): where the module
  owns its ``qkv`` projection (InLine attention, identity kernel, global, the per-sample
  path), ``q M = x (W_q^T M) + b_q M`` takes the projection into the kernel: the queries
  are never made, and the forward's ``q M``, the backward's ``dQ`` and ``dM = Q^T dO``
  (skinny products, inner dimension ``d``) become one dense ``C x C`` product of ``x``
  and ``d x C`` products of the weights. On a map of at least ``C * heads`` tokens the
  keys go too: ``Cov(K, V)_h = W_k,h Cov(x) W_v,h^T`` from one Gram product ``x^T x``.
  :meth:`.attention.InLineAttention.attend`
  (InLine-CSwin's branches, the attention-map capture) keeps the kernel above on the
  projection's output.
* Padding awareness in the kernel: each image of a padded batch is the top-left
  ``(h, w)`` region of the map (``regions``). The statistics run over each image's
  tokens: the means are sums over its region divided by its count, and ``K^T V``
  reads V from its copy, with zeros written outside each region (so the local term,
  whose input it is, sees zeros past the image, as at the border of an image alone).
  The backward zeroes the K/V gradient of the tokens outside. Every zeroing writes the
  padding's own tokens only: no mask is read and autograd records nothing outside the
  function.
* The ``d x d`` statistics are reduced in fp32 even under autocast: their sum runs
  over every token of a high-resolution map, and a bounded mean (rather than a raw
  sum) in fp32 is what keeps fp16/bf16 from overflowing.  Token-wise products stay
  in the input dtype.
"""
from typing import Optional, Tuple

import torch
import torch.nn.functional as F

from .padding import NO_PADDING, Regions, ValidMap, batched_path, zero_outside_

__all__ = ['inline_qkv', 'inline_folded', 'inline_attention', 'local_residual', 'depthwise3x3',
           'is_exporting',
           'KERNELS', 'LINEAR_EPS', 'apply_kernel', 'guard_denominator', 'plain_qkv',
           'plain_attention',
           'reference_inline_attention', 'reference_local_residual', 'reference_attention']

_F32 = torch.float32


def _autocast_off(t: torch.Tensor):
    return torch.autocast(device_type=t.device.type, enabled=False)


def _f32(t: torch.Tensor) -> torch.Tensor:
    return t if t.dtype == _F32 else t.float()


def _conv_cl(x: torch.Tensor) -> torch.Tensor:
    """``(B, H, W, C)`` -> the same memory as a channels-last ``(B, C, H, W)`` view."""
    return x.permute(0, 3, 1, 2)


def _region_sums(t: torch.Tensor, hw: Tuple[int, int], prefix: int,
                 regions: Regions) -> torch.Tensor:
    """``(B, heads, prefix + H*W, d)`` (any strides) -> ``(B, heads, 1, d)`` fp32 sums
    over each image's tokens: its prefix tokens and its region of the map."""
    b, heads, _, d = t.shape
    out = t.new_empty((b, heads, 1, d), dtype=_F32)
    for i, (h, w) in enumerate(regions):
        torch.sum(t[i, :, prefix:].unflatten(1, hw)[:, :h, :w], dim=(1, 2), dtype=_F32,
                  out=out[i, :, 0])
        if prefix:
            out[i, :, 0] += t[i, :, :prefix].sum(dim=1, dtype=_F32)
    return out


def _v_tokens(v: torch.Tensor, hw: Tuple[int, int], prefix: int,
              regions: Optional[Regions]) -> torch.Tensor:
    """``(B, heads, N, d)`` view of V -> a dense token-layout ``(B, N, C)`` copy, zero
    outside each image's region of a padded batch (its prefix tokens kept). Its map
    part, :func:`_v_image`, is the local term's input: a dense channels-last image
    (oneDNN's depthwise convolution of the strided view of V takes ~1.8x the copy and
    the convolution of the dense one together)."""
    b, heads, n, d = v.shape
    v_tok = v.new_empty((b, n, heads * d))
    v_tok.view(b, n, heads, d).copy_(v.transpose(1, 2))
    if regions is not None:
        zero_outside_(v_tok[:, prefix:].unflatten(1, hw), regions)
    return v_tok


def _v_image(v_tok: torch.Tensor, hw: Tuple[int, int], prefix: int) -> torch.Tensor:
    """The map part of :func:`_v_tokens` as a channels-last ``(B, C, H, W)`` view."""
    b, _, c = v_tok.shape
    return _conv_cl(v_tok[:, prefix:].view(b, hw[0], hw[1], c))


def _local_backward(grad: torch.Tensor, v_img: torch.Tensor, kernels: torch.Tensor,
                    hw: Tuple[int, int], prefix: int, need_v: bool, need_kernels: bool):
    """The local term's backward, per sample: each image's ``dV`` as a ``(1, H, W, C)``
    view of a channels-last gradient (None where not needed) and the kernels' gradient
    ``(B, C, 3, 3)`` (or None). ``v_img`` is the forward's channels-last V image,
    ``kernels`` ``(B, C, 1, 3, 3)``."""
    b, c = kernels.shape[:2]
    grad_img = _conv_cl(grad[:, prefix:].view(b, hw[0], hw[1], c))
    grad_v, grad_k = [], []
    for i in range(b):
        dv, dk, _ = torch.ops.aten.convolution_backward(
            grad_img[i:i + 1], v_img[i:i + 1], kernels[i], None, [1, 1], [1, 1], [1, 1],
            False, [0, 0], c, [need_v, need_kernels, False])
        grad_v.append(None if dv is None else dv.permute(0, 2, 3, 1))
        grad_k.append(dk)
    return grad_v, (torch.stack(grad_k).view(b, c, 3, 3) if need_kernels else None)


class _InLineFunction(torch.autograd.Function):
    """InLine attention of a packed ``qkv`` view, optionally with the local term.

    Inputs: ``qkv`` ``(B, 3, heads, N, d)`` (any strides; the projection output
    ``(B, N, 3C)`` viewed without a copy), ``kernels`` ``(B, C, 3, 3)`` or None,
    ``bias`` ``(C,)`` or None (added with the local term), ``hw``, ``scale``,
    ``prefix`` (tokens before the ``H x W`` map: in the linear term, not in the
    local one), and for a padded batch ``counts`` ``(B,)`` fp32 (tokens each
    sample's means divide by) with ``regions`` (each image's ``(h, w)`` on the map;
    its prefix tokens count too), or None.
    Output: ``(B, N, C)`` in token layout.
    """

    @staticmethod
    def forward(ctx, qkv, kernels, bias, hw, scale, prefix=0, counts=None, regions=None):
        with _autocast_off(qkv):
            b, _, heads, n, d = qkv.shape
            c = heads * d
            dt = qkv.dtype
            q, k, v = qkv.unbind(1)                                         # (B, heads, N, d)
            v_stat, x_img = v, None
            if kernels is not None or regions is not None:
                # V's dense copy: the local term's input; padded, zero outside each image,
                # so that the statistics read it too.
                v_tok = _v_tokens(v, hw, prefix, regions)
                v_stat = v_tok.view(b, n, heads, d).transpose(1, 2)
                x_img = _v_image(v_tok, hw, prefix) if kernels is not None else None
            if regions is None:
                per = n
                means = qkv[:, 1:].sum(dim=3, keepdim=True, dtype=_F32).div_(n)
            else:
                # Tokens each sample's statistics are over: (B, 1, 1, 1).
                per = counts.view(b, 1, 1, 1)
                means = torch.stack([_region_sums(k, hw, prefix, regions),
                                     _region_sums(v_stat, hw, prefix, regions)], 1)
                means.div_(per.unsqueeze(1))
            k_mean, v_mean = means.unbind(1)                                # (B, heads, 1, d)

            cov = qkv.new_empty((b, heads, d, d), dtype=_F32)
            for i in range(b):
                # In fp32 this reads the strided views directly; in fp16/bf16 the
                # per-sample fp32 copy keeps the reduction exact and bounded. Padded:
                # V is zero outside each image, so the sum runs over its tokens.
                torch.bmm(_f32(k[i]).transpose(1, 2), _f32(v_stat[i]), out=cov[i])
            cov.div_(per).sub_(k_mean.transpose(-2, -1) @ v_mean)
            m = cov.mul_(scale).to(dt)                                      # (B, heads, d, d)

            out = qkv.new_empty((b, n, c))
            out_h = out.view(b, n, heads, d).transpose(1, 2)                # (B, heads, N, d)
            # mean(V) rides along as the convolution bias where the local term covers
            # every token; prefix tokens have none, so then it joins the product.
            fold_mean = kernels is not None and prefix == 0
            for i in range(b):
                if fold_mean:
                    torch.bmm(q[i], m[i], out=out_h[i])
                else:
                    torch.baddbmm(v_mean[i].to(dt), q[i], m[i], out=out_h[i])
            if kernels is not None:
                kernels = kernels.to(dt).reshape(b, c, 1, 3, 3)
                conv_bias = v_mean.reshape(b, c) if fold_mean else None
                if bias is not None:
                    conv_bias = bias.to(_F32).expand(b, c) if conv_bias is None \
                        else conv_bias + bias.to(_F32)
                conv_bias = [None] * b if conv_bias is None else conv_bias.to(dt)
                for i in range(b):
                    local = F.conv2d(x_img[i:i + 1], kernels[i], conv_bias[i], padding=1, groups=c)
                    out[i, prefix:].add_(local.permute(0, 2, 3, 1).reshape(n - prefix, c))
        # The copy of V is not kept: the backward makes it again rather than holding
        # N x C per block for the whole forward pass.
        ctx.save_for_backward(qkv, m, means, kernels, counts)
        ctx.scale, ctx.hw, ctx.prefix, ctx.has_bias = scale, hw, prefix, bias is not None
        ctx.regions = regions
        return out

    @staticmethod
    def backward(ctx, grad):
        qkv, m, means, kernels, counts = ctx.saved_tensors
        need_qkv, need_kernels, need_bias = ctx.needs_input_grad[:3]
        scale, p, regions = ctx.scale, ctx.prefix, ctx.regions
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
                grad_local, grad_kernels = _local_backward(
                    grad, _v_image(_v_tokens(v, ctx.hw, p, regions), ctx.hw, p), kernels,
                    ctx.hw, p, need_qkv, need_kernels)

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
                # Each row of dK (dV) depends on its own token's V (K) only, so the
                # rows inside an image are right from the unmasked values.
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
                        grad_tok[i, p:, 2].view(n - p, c).add_(dx.reshape(n - p, c))
                if regions is not None:
                    # K and V outside an image did not enter the result.
                    zero_outside_(grad_tok[:, p:, 1:].unflatten(1, ctx.hw), regions)
            if need_bias and ctx.has_bias:
                grad_bias = (grad_sum if p == 0 else grad[:, p:].sum(dim=1, dtype=_F32)).sum(0)
        return grad_qkv, grad_kernels, grad_bias, None, None, None, None, None


# --------------------------------------------------------------------------- the fold
# On the per-sample path, for InLine attention with the identity kernel, the module's own
# qkv projection joins the kernel: q M = (x W_q^T + b_q) M = x (W_q^T M) + b_q M, so the
# queries are never made and the forward's q M, the backward's dQ = dO M^T and
# dM = Q^T dO products (skinny, inner dimension d) become one dense C x C projection of
# x and d x C products of the weights. On a large map the keys go as well: the key/value
# covariance is the projection of x's own, Cov(K, V)_h = W_k,h Cov(x) W_v,h^T, and
# mean(V) = W_v mean(x) + b_v, so one Gram product x^T x (C x C) replaces K (N x C) and
# K^T V, and the backward's dK, dV products and the dK part of dx and dW.


#: what copying a token costs, in multiply-adds per channel of a Gram or projection
#: product of it (measured ~20 on one CPU thread at C = 64-192)
_COPY_COST = 20


def _own_tokens(t: torch.Tensor, hw: Tuple[int, int], prefix: int, region: Tuple[int, int]):
    """``[(sign, view)]``: one image's own tokens of ``t`` (``(prefix + H*W, C)``, one
    sample), as the parts a sum over them adds (+1) and takes back (-1).

    An image spanning the map's width: one contiguous block (the prefix tokens and its
    rows). Narrower: that block less the strip to its right (``(h, W - w, C)``), or the
    region itself (``(h, w, C)``) and the prefix, whichever costs less to copy and
    multiply (:data:`_COPY_COST`): sums over the own tokens never run over the whole
    map, so a padded image costs at most what it would fill."""
    (_, wm), c = hw, t.shape[-1]
    h, w = region
    block = t[:prefix + h * wm]
    if w == wm:
        return [(1, block)]
    rows = t[prefix:prefix + h * wm].view(h, wm, c)
    if wm * c + (wm - w) * (c + _COPY_COST) <= w * (c + _COPY_COST):
        return [(1, block), (-1, rows[:, w:])]
    return [(1, rows[:, :w])] + ([(1, t[:prefix])] if prefix else [])


def _gram_pays(n: int, c: int, heads: int) -> bool:
    """Whether the fold takes its statistics from ``x``'s covariance: per sample it costs
    ``C^3`` multiply-adds to project the ``C x C`` covariance per head (``4 C^3`` with the
    backward's), where K costs ``N C d`` for ``K^T V`` and ``3 N C^2`` more in the backward
    (``dK`` into ``dx`` and ``dW_k``, less the Gram's own); at least ``C * heads`` tokens
    (``N d >= C^2``) it pays."""
    return n * (c // heads) >= c * c


class _FoldedInLineFunction(torch.autograd.Function):
    """InLine attention with the qkv projection folded in (identity kernel).

    Inputs: ``x`` ``(B, N, C)``, the qkv projection's ``weight`` ``(3C, C)`` and
    ``qkv_bias`` ``(3C,)`` or None, then as :class:`_InLineFunction`: ``kernels``,
    ``bias``, ``hw``, ``scale``, ``prefix``, ``counts``, ``regions``; ``heads``; ``gram``
    (the statistics from x's covariance; None: where :func:`_gram_pays`).
    Output: ``(B, N, C)``, what ``_InLineFunction`` gives on ``x``'s projection.

    Forward: V from its projection into a dense token-layout buffer (the local term's
    channels-last input as it is: no copy), zero outside each image of a padded batch;
    ``M`` per head and ``mean(V)`` either from x's covariance (``gram``: ``S = x^T x / n -
    mean(x)^T mean(x)`` over each image's tokens, ``Cov_h = W_k,h S W_v,h^T``,
    ``mean(V) = W_v mean(x) + b_v``) or from K (``K^T V``, K and V zero outside each
    image); then per sample one ``addmm``: ``x A_i + c_i`` with ``A_i = [W_q,h^T M_h]_h``
    (``C x C``) and ``c_i = b_q M + mean(V)``. Saved: ``x``, V, and K without ``gram``: at
    most 3 N x C, as the module's ``qkv`` output (not made).

    Backward (``dO`` the output gradient, ``dA_i = dO_i^T x_i``, ``dc_i = colsum dO_i``):
    ``dx = dO A^T + ...``, ``dW_q,h = M_h dA_h``, ``dM_h = W_q,h dA_h^T + b_q,h^T dc_h``,
    ``db_q = dc M^T``, ``dCov = s dM``; then ``gram``: ``dS = sum_h W_k,h^T dCov_h W_v,h``,
    ``dx += x (dS + dS^T) / n`` plus a row offset from ``d mean(x)``, ``dW_k,h = dCov_h W_v,h
    S``, ``dW_v,h = dCov_h^T W_k,h S + dc_h^T mean(x)``; otherwise dK and dV as in
    :class:`_InLineFunction` (``colsum(dO)`` is ``d mean(V)``) and ``dx += [dK dV] W_kv``,
    ``dW_kv = [dK dV]^T x``. The local term's ``dV`` joins ``dx``, ``dW_v`` and ``db_v``.
    """

    @staticmethod
    def forward(ctx, x, weight, qkv_bias, kernels, bias, hw, scale, heads, prefix=0,
                counts=None, regions=None, gram=None):
        b, n, c = x.shape
        d = c // heads
        dt = x.dtype
        p = prefix
        gram = _gram_pays(n, c, heads) if gram is None else gram
        w_q, w_k, w_v = weight.detach().split(c)
        b_q = b_v = None
        if qkv_bias is not None:
            b_q, _, b_v = qkv_bias.detach().split(c)
        # Tokens each sample's statistics are over: (B, 1, 1), or all n.
        per = n if regions is None else counts.view(b, 1, 1)
        v = F.linear(x, w_v, b_v)                                           # (B, N, C)
        if regions is not None:
            zero_outside_(v[:, p:].unflatten(1, hw), regions)
        k = means = x_mean = cov_x = None
        if gram:
            # x's covariance over each image's own tokens (padded: :func:`_own_tokens`).
            xf = _f32(x)
            if regions is None:
                x_sum = xf.sum(dim=1)                                       # (B, C)
                cov_x = torch.bmm(xf.transpose(1, 2), xf)                   # (B, C, C)
            else:
                x_sum = xf.new_zeros((b, c))
                cov_x = xf.new_zeros((b, c, c))
                for i, region in enumerate(regions):
                    for sign, part in _own_tokens(xf[i], hw, p, region):
                        part = part.reshape(-1, c)     # a strided part: a copy of it
                        cov_x[i].addmm_(part.t(), part, alpha=sign)
                        x_sum[i].add_(part.sum(dim=0), alpha=sign)
            del xf
            x_mean = x_sum.div_(n if regions is None else counts.view(b, 1))
            cov_x.div_(per).sub_(x_mean.unsqueeze(2) * x_mean.unsqueeze(1))  # Cov(x)
            cov = _f32(w_k).view(heads, d, c) @ cov_x.unsqueeze(1) \
                @ _f32(w_v).view(heads, d, c).transpose(-2, -1)             # (B, heads, d, d)
            v_mean = x_mean @ _f32(w_v).t()
            if b_v is not None:
                v_mean += _f32(b_v)
            v_mean = v_mean.view(b, heads, 1, d)
        else:
            # K without its bias: Cov(K, V) and (K - mean K) do not change with a constant
            # added to K, so b_k has no effect on the output (and a zero gradient).
            k = torch.matmul(x, w_k.t())                                    # (B, N, C)
            if regions is not None:
                zero_outside_(k[:, p:].unflatten(1, hw), regions)
            k_h = k.view(b, n, heads, d).transpose(1, 2)                    # (B, heads, N, d)
            v_h = v.view(b, n, heads, d).transpose(1, 2)
            means = torch.stack([k.sum(dim=1, dtype=_F32), v.sum(dim=1, dtype=_F32)], 1)
            means = means.view(b, 2, heads, 1, d).div_(
                n if regions is None else counts.view(b, 1, 1, 1, 1))
            k_mean, v_mean = means.unbind(1)                                # (B, heads, 1, d)
            cov = x.new_empty((b, heads, d, d), dtype=_F32)
            for i in range(b):
                torch.bmm(_f32(k_h[i]).transpose(1, 2), _f32(v_h[i]), out=cov[i])
            cov.div_(per if regions is None else per.unsqueeze(1)).sub_(
                k_mean.transpose(-2, -1) @ v_mean)
        m = cov.mul_(scale).to(dt)                                          # (B, heads, d, d)
        # A_i as a linear layer's (out, in) weight: row h*d + j is (M_h^T W_q,h)[j].
        w_fold = (m.transpose(-2, -1) @ w_q.view(heads, d, c)).view(b, c, c)
        c_fold = v_mean.to(dt).reshape(b, c)
        if b_q is not None:
            c_fold = c_fold + (b_q.view(1, heads, 1, d) @ m).reshape(b, c)
        if kernels is None:
            out = torch.baddbmm(c_fold.unsqueeze(1), x, w_fold.transpose(1, 2))  # (B, N, C)
        else:
            kernels = kernels.to(dt).reshape(b, c, 1, 3, 3)
            h, w = hw
            x_img = _conv_cl(v[:, p:].view(b, h, w, c))
            if p == 0:
                # c_i rides along as the convolution's bias, and the product accumulates
                # onto the local term in place (token layout: the convolution's
                # channels-last output): no pass over the output but the GEMM's own.
                conv_bias = c_fold if bias is None else c_fold + bias.to(dt)
                out = None if b == 1 else x.new_empty((b, n, c))
                for i in range(b):
                    local = F.conv2d(x_img[i:i + 1], kernels[i], conv_bias[i], padding=1,
                                     groups=c).permute(0, 2, 3, 1).reshape(n, c)
                    if out is None:
                        out = local.addmm_(x[i], w_fold[i].t()).view(1, n, c)
                    else:
                        out[i].copy_(local).addmm_(x[i], w_fold[i].t())
            else:
                out = torch.baddbmm(c_fold.unsqueeze(1), x, w_fold.transpose(1, 2))
                conv_bias = None if bias is None else bias.to(dt)
                for i in range(b):
                    local = F.conv2d(x_img[i:i + 1], kernels[i], conv_bias, padding=1, groups=c)
                    out[i, p:].add_(local.permute(0, 2, 3, 1).reshape(n - p, c))
        ctx.save_for_backward(x, weight, qkv_bias, v, m, w_fold, kernels, counts,
                              k, means, x_mean, cov_x)
        ctx.scale, ctx.hw, ctx.prefix, ctx.heads, ctx.gram = scale, hw, prefix, heads, gram
        ctx.has_bias, ctx.regions = bias is not None, regions
        return out

    @staticmethod
    def backward(ctx, grad):
        (x, weight, qkv_bias, v, m, w_fold, kernels, counts, k, means, x_mean,
         cov_x) = ctx.saved_tensors
        need_x, need_w, need_qb, need_kernels, need_bias = ctx.needs_input_grad[:5]
        scale, p, regions, heads = ctx.scale, ctx.prefix, ctx.regions, ctx.heads
        b, n, c = x.shape
        d = c // heads
        dt = x.dtype
        h, w = ctx.hw
        grad = grad.contiguous()
        grad_sum = grad.sum(dim=1, dtype=_F32)                              # (B, C): dc
        grad_x = grad_w = grad_qb = grad_kernels = grad_bias = None
        w_q, w_k, w_v = weight.detach().split(c)
        b_q = None if qkv_bias is None else qkv_bias.detach()[:c]
        per = n if regions is None else counts.view(b, 1, 1)

        # The local term's dV per sample, (N - p, C) in token layout; padded, zero outside
        # the image (its V was).
        grad_local = None
        if kernels is not None and (need_x or need_w or need_qb or need_kernels):
            grad_local, grad_kernels = _local_backward(
                grad, _conv_cl(v[:, p:].view(b, h, w, c)), kernels, ctx.hw, p, True,
                need_kernels)
            if regions is not None:
                for dv, region in zip(grad_local, regions):
                    zero_outside_(dv, [region])
            grad_local = [dv.reshape(n - p, c) for dv in grad_local]

        if need_x or need_w or need_qb:
            # dA_i = dO_i^T x_i: (B, C_out, C_in), rows h*d + j.
            grad_fold = torch.bmm(grad.transpose(1, 2), x)
            gf_h = grad_fold.view(b, heads, d, c)
            # dM_h = W_q,h dA_h^T (+ b_q,h^T dc_h), in fp32.
            dm = torch.matmul(_f32(w_q).view(heads, d, c), _f32(gf_h).transpose(-2, -1))
            dc = grad_sum.view(b, heads, 1, d)
            if b_q is not None:
                dm += _f32(b_q).view(1, heads, d, 1) * dc
            dcov = dm.mul_(scale)                                           # (B, heads, d, d)
            if ctx.gram:
                grads = _gram_backward(ctx, grad, x, weight.detach(), w_fold, x_mean, cov_x,
                                       dcov, grad_sum, grad_local, per)
            else:
                grads = _keys_backward(ctx, grad, x, weight.detach(), w_fold, k, v, means,
                                       dcov, dc, grad_local, per)
            grad_x, grad_kv, grad_bv = grads
            if need_w:
                grad_w = weight.new_empty(weight.shape)
                # dW_q,h = M_h dA_h, summed over the batch.
                torch.matmul(m.permute(1, 2, 0, 3).reshape(heads, d, b * d),
                             gf_h.transpose(0, 1).reshape(heads, b * d, c),
                             out=grad_w[:c].view(heads, d, c))
                grad_w[c:].copy_(grad_kv)
            if need_qb and qkv_bias is not None:
                grad_qb = qkv_bias.new_zeros(qkv_bias.shape)
                # db_q,h = dc_h M_h^T; db_k = 0 (see the forward).
                grad_qb[:c] = (dc.to(dt) @ m.transpose(-2, -1)).sum(0).reshape(c)
                grad_qb[2 * c:] = grad_bv
        if need_bias and ctx.has_bias:
            grad_bias = (grad_sum if p == 0 else grad[:, p:].sum(dim=1, dtype=_F32)).sum(0)
        return (grad_x, grad_w, grad_qb, grad_kernels, grad_bias, None, None, None, None,
                None, None, None)


def _gram_backward(ctx, grad, x, weight, w_fold, x_mean, cov_x, dcov, grad_sum, grad_local,
                   per):
    """:class:`_FoldedInLineFunction`'s backward from ``dCov`` with the statistics from
    x's covariance ``S``: ``dx``, ``[dW_k; dW_v]`` and ``db_v`` (None where not needed)."""
    need_x, need_w, need_qb = ctx.needs_input_grad[:3]
    b, n, c = x.shape
    w_k, w_v = weight[c:].split(c)
    heads, d = dcov.shape[1], dcov.shape[-1]
    p, regions, dt = ctx.prefix, ctx.regions, x.dtype
    wk_h, wv_h = _f32(w_k).view(heads, d, c), _f32(w_v).view(heads, d, c)
    grad_x = grad_kv = grad_bv = None
    if need_x:
        # dS = sum_h W_k,h^T dCov_h W_v,h, as [W_k,h^T dCov_h]_h (C x C) times W_v.
        ds = (wk_h.transpose(-2, -1) @ dcov).transpose(1, 2).reshape(b, c, c) @ _f32(w_v)
        ds = ds + ds.transpose(1, 2)                                        # dS + dS^T
        # d mean(x): from mean(V) = W_v mean(x) + b_v and from S's - mean(x)^T mean(x).
        dmean = grad_sum @ _f32(w_v) - (x_mean.unsqueeze(1) @ ds).squeeze(1)
        row = dmean.div_(n if regions is None else per.view(b, 1)).to(dt)
        # x (dS + dS^T) / n and the row on each image's own tokens (padded: only
        # there, the tokens outside have no part in its statistics).
        ds = ds.div_(per).to(dt)
        if regions is None:
            grad_x = torch.baddbmm(row.unsqueeze(1), grad, w_fold).baddbmm_(x, ds)
        else:
            grad_x = torch.bmm(grad, w_fold)
            for i, region in enumerate(regions):
                for (sign, part), (_, g_part) in zip(_own_tokens(x[i], ctx.hw, p, region),
                                                     _own_tokens(grad_x[i], ctx.hw, p, region)):
                    g_part.add_((part.reshape(-1, c) @ ds[i]).add_(row[i]).view(g_part.shape),
                                alpha=sign)
        if grad_local is not None:
            for i in range(b):
                grad_x[i, p:].addmm_(grad_local[i], w_v)
    if need_w:
        grad_kv = x.new_empty((2 * c, c))
        # dW_k,h = dCov_h W_v,h S and dW_v,h = dCov_h^T W_k,h S (+ dc_h^T mean(x)),
        # summed over the batch.
        cov_x = cov_x.unsqueeze(1)
        grad_kv[:c] = (dcov @ (wv_h @ cov_x)).sum(0).view(c, c)
        dwv = (dcov.transpose(-2, -1) @ (wk_h @ cov_x)).sum(0).view(c, c)
        grad_kv[c:] = dwv.addmm_(grad_sum.t(), x_mean)
        if grad_local is not None:
            for i in range(b):
                grad_kv[c:].addmm_(grad_local[i].t(), x[i, p:])
    if need_qb:
        grad_bv = grad_sum.sum(0)
        for g in grad_local or ():
            grad_bv += g.sum(0, dtype=_F32)
    return grad_x, grad_kv, grad_bv


def _keys_backward(ctx, grad, x, weight, w_fold, k, v, means, dcov, dc, grad_local, per):
    """:class:`_FoldedInLineFunction`'s backward from ``dCov`` with the statistics from
    K: ``dx``, ``[dW_k; dW_v]`` and ``db_v`` (None where not needed)."""
    need_x, need_w, need_qb = ctx.needs_input_grad[:3]
    b, n, c = x.shape
    heads, d = dcov.shape[1], dcov.shape[-1]
    p, regions, dt = ctx.prefix, ctx.regions, x.dtype
    w_kv = weight[c:]
    k_mean, v_mean = means.unbind(1)
    per = per if regions is None else per.unsqueeze(1)                     # (B, 1, 1, 1)
    dcov_n = dcov.div_(per)                                                 # dCov / n
    off_k = -(v_mean @ dcov_n.transpose(-2, -1))
    off_v = dc / per - k_mean @ dcov_n
    dcov_n, off_k, off_v = dcov_n.to(dt), off_k.to(dt), off_v.to(dt)

    k_h = k.view(b, n, heads, d).transpose(1, 2)
    v_h = v.view(b, n, heads, d).transpose(1, 2)
    grad_kv = x.new_empty((b, n, 2, heads, d))
    dk, dv = grad_kv.permute(0, 2, 3, 1, 4).unbind(1)                      # (B, heads, N, d)
    # Unpadded, the row offsets of dK and dV (the same for every token) are not
    # written: they reach dx as one row, dW_kv as a rank-one term and db_v as n
    # times themselves; the local term's dV is then the dV product's
    # accumulator instead of a pass of its own. Padded, rows outside an image
    # must stay 0, and the offsets are written.
    rank1 = regions is None
    for i in range(b):
        dxl = None if grad_local is None else grad_local[i]
        if rank1:
            torch.bmm(v_h[i], dcov_n[i].transpose(1, 2), out=dk[i])
            if dxl is not None and p == 0:
                torch.baddbmm(dxl.view(n, heads, d).transpose(0, 1), k_h[i], dcov_n[i],
                              out=dv[i])
                dxl = None
            else:
                torch.bmm(k_h[i], dcov_n[i], out=dv[i])
        else:
            torch.baddbmm(off_k[i], v_h[i], dcov_n[i].transpose(1, 2), out=dk[i])
            torch.baddbmm(off_v[i], k_h[i], dcov_n[i], out=dv[i])
        if dxl is not None:
            grad_kv[i, p:, 1].view(n - p, c).add_(dxl)
    if regions is not None:
        zero_outside_(grad_kv[:, p:].unflatten(1, ctx.hw), regions)
    grad_kv = grad_kv.view(b, n, 2 * c)
    off_kv = torch.cat([off_k.reshape(b, 1, c), off_v.reshape(b, 1, c)], -1) \
        if rank1 else None                                                  # (B, 1, 2C)
    grad_x = grad_w = None
    if need_x:
        if rank1:
            grad_x = torch.baddbmm(off_kv @ w_kv, grad, w_fold)
            grad_x.view(b * n, c).addmm_(grad_kv.view(b * n, 2 * c), w_kv)
        else:
            grad_x = torch.matmul(grad_kv, w_kv).baddbmm_(grad, w_fold)
    if need_w:
        grad_w = torch.mm(grad_kv.reshape(b * n, 2 * c).t(), x.reshape(b * n, c))
        if rank1:
            grad_w.addmm_(off_kv.view(b, 2 * c).t(), x.sum(dim=1))
    grad_bv = None
    if need_qb:
        grad_bv = grad_kv[..., c:].sum(dim=(0, 1))
        if rank1:
            grad_bv.add_(off_v.reshape(b, c).sum(0), alpha=n)
    return grad_x, grad_w, grad_bv


def _check_map(n: int, hw: Tuple[int, int], prefix: int, valid: ValidMap):
    """``n`` tokens are ``prefix`` tokens plus the ``hw`` map that ``valid`` describes."""
    (h, w), p = hw, prefix
    if p + h * w != n:
        raise ValueError(f'{n} tokens do not form a {h}x{w} map' if p == 0 else
                         f'{n} tokens are not {p} prefix token(s) plus a {h}x{w} map')
    if valid.is_padded and (tuple(valid.hw) != (h, w) or valid.prefix != p):
        raise ValueError(f'valid describes a {valid.hw[0]}x{valid.hw[1]} map with '
                         f'{valid.prefix} prefix token(s), the tokens are a {h}x{w} map '
                         f'with {p}')


def _host_regions(valid: ValidMap) -> Optional[Regions]:
    """Each image's ``(h, w)`` for the per-sample kernels (None: no padding)."""
    if not valid.is_padded:
        return None
    if valid.sizes is None:
        raise ValueError('the per-sample InLine kernel needs the images\' sizes on the host: '
                         'give ValidMap Python (h, w) pairs, or run the batched path')
    return tuple(valid.sizes)


def inline_folded(x: torch.Tensor, weight: torch.Tensor, qkv_bias: Optional[torch.Tensor],
                  num_heads: int, hw: Tuple[int, int], scale: float,
                  kernels: Optional[torch.Tensor] = None, bias: Optional[torch.Tensor] = None,
                  num_prefix_tokens: int = 0, valid: ValidMap = NO_PADDING,
                  gram: Optional[bool] = None) -> torch.Tensor:
    """:func:`inline_qkv` of ``F.linear(x, weight, qkv_bias)`` with the projection folded
    into the kernel (identity kernel, the per-sample path; see
    :class:`_FoldedInLineFunction`). ``x`` ``(B, N, C)``, ``weight`` ``(3C, C)``; the
    other arguments as :func:`inline_qkv`; ``gram``: the statistics from ``x``'s
    covariance (True) or from the keys (False); None: by cost (:func:`_gram_pays`).
    Returns ``(B, N, C)`` before any output projection."""
    b, n, c = x.shape
    p = num_prefix_tokens
    _check_map(n, hw, p, valid)
    if weight.shape != (3 * c, c):
        raise ValueError(f'weight must be (3C, C) = {(3 * c, c)}, got {tuple(weight.shape)}')
    regions = _host_regions(valid)
    return _FoldedInLineFunction.apply(x, weight, qkv_bias, kernels, bias, hw, scale, num_heads,
                                       p, valid.counts if regions else None, regions, gram)


def _depthwise3x3_shifted(x_img: torch.Tensor, kernels: torch.Tensor) -> torch.Tensor:
    """Nine shifted multiply-adds (plain Pad/Slice/Mul/Add nodes): what a tracer and ONNX
    record, with the batch a free dimension."""
    h, w = x_img.shape[-2:]
    xp = F.pad(x_img, (1, 1, 1, 1))
    out = None
    for dy in range(3):
        for dx in range(3):
            term = xp[:, :, dy:dy + h, dx:dx + w] * kernels[:, :, dy, dx, None, None]
            out = term if out is None else out + term
    return out


def depthwise3x3(x_img: torch.Tensor, kernels: torch.Tensor) -> torch.Tensor:
    """Depthwise 3x3 convolution, zero padding 1, with a kernel per sample and no loop
    over the batch: the local term of every path but the per-sample kernel.

    ``x_img`` ``(B, C, H, W)``, ``kernels`` ``(B, C, 3, 3)`` -> ``(B, C, H, W)``. Eager:
    one grouped convolution with ``groups = B * C`` (one launch). Under ``torch.compile``:
    the 3x3 windows as a view (``Tensor.unfold``) weighted and summed, which Inductor
    fuses into one kernel (its grouped convolution with a symbolic group count compiles
    for minutes). Traced or exported: nine shifted multiply-adds, as ONNX has no
    convolution whose group count follows the batch.
    """
    b, c, h, w = x_img.shape
    kernels = kernels.to(x_img.dtype)
    if is_exporting():
        return _depthwise3x3_shifted(x_img, kernels)
    if torch.compiler.is_compiling():
        patches = F.pad(x_img, (1, 1, 1, 1)).unfold(2, 3, 1).unfold(3, 3, 1)  # (B, C, H, W, 3, 3)
        return (patches * kernels[:, :, None, None]).sum(dim=(-2, -1))
    out = F.conv2d(x_img.reshape(1, b * c, h, w), kernels.reshape(b * c, 1, 3, 3),
                   padding=1, groups=b * c)
    return out.view(b, c, h, w)


def _add_local(out: torch.Tensor, local: torch.Tensor, bias: Optional[torch.Tensor],
               prefix: int) -> torch.Tensor:
    """``out`` ``(B, N, C)`` plus the ``(B, C, H, W)`` local term (and ``bias``) on the
    map's tokens, the ``prefix`` tokens before them left as they are."""
    b, n, c = out.shape
    local = local.permute(0, 2, 3, 1).reshape(b, n - prefix, c)
    if bias is not None:
        local = local + bias.to(local.dtype)
    if prefix:
        return torch.cat([out[:, :prefix], out[:, prefix:] + local], dim=1)
    return out + local


def is_exporting() -> bool:
    """Whether a graph is being recorded by ``torch.jit.trace`` or the TorchScript ONNX
    exporter (their tracer cannot record the hand-written autograd function)."""
    return torch.jit.is_tracing() or torch.onnx.is_in_onnx_export()


def _inline(packed, kernels, bias, hw, scale, prefix=0, valid: ValidMap = NO_PADDING):
    """Dispatch: the plain form (:func:`plain_attention`) on the batched path, under
    ``torch.compile``, tracing and export; the hand-written per-sample kernel otherwise.
    ``packed``: ``(B, 3, heads, N, d)``; other arguments: see :class:`_InLineFunction`;
    ``valid`` gives the padding (the plain form takes its token mask, the kernel each
    image's region)."""
    if is_exporting() or batched_path(valid, packed.device):
        q, k, v = packed.unbind(1)
        if valid.is_padded:
            # Keys and values outside an image are zero (tokens there may hold anything).
            keep = valid.mask[:, None, :, None]
            k, v = torch.where(keep, k, k.new_zeros(())), torch.where(keep, v, v.new_zeros(()))
        out = plain_attention(q, k, v, scale, valid.mask, valid.counts)
        return out if kernels is None else _add_local(
            out, depthwise3x3(_v_map(v, hw, prefix), kernels), bias, prefix)
    regions = _host_regions(valid)
    return _InLineFunction.apply(packed, kernels, bias, hw, scale, prefix, valid.counts, regions)


def inline_qkv(qkv: torch.Tensor, num_heads: int, hw: Tuple[int, int], scale: float,
               kernels: Optional[torch.Tensor] = None, bias: Optional[torch.Tensor] = None,
               num_prefix_tokens: int = 0, valid: ValidMap = NO_PADDING) -> torch.Tensor:
    """InLine attention, local term included, from a projection's ``qkv`` output.

    Args:
        qkv (Tensor): ``(B, N, 3C)`` queries, keys, values (in that order along the
            last axis, heads contiguous within each), ``N = num_prefix_tokens + H*W``.
            Not written.
        num_heads (int): Heads; must divide ``C``.
        hw (tuple[int, int]): The map size ``(H, W)``.
        scale (float): ``s`` of the formula.
        kernels (Tensor, optional): ``(B, C, 3, 3)`` local kernels; None: no local term.
        bias (Tensor, optional): ``(C,)`` added with the local term (LePE's bias).
        num_prefix_tokens (int): Tokens before the map (a class token): in the linear
            term, outside the local one. Default: 0.
        valid (ValidMap): Each image's region of a padded batch (on this ``hw`` map,
            prefix tokens counted): the statistics run over its tokens only and the
            local term sees zeros outside it. Tokens outside may hold anything
            finite. Default: ``NO_PADDING``.

    Returns:
        Tensor: ``(B, N, C)``, before any output projection.
    """
    b, n, c3 = qkv.shape
    p = num_prefix_tokens
    _check_map(n, hw, p, valid)
    c = c3 // 3
    packed = qkv.reshape(b, n, 3, num_heads, c // num_heads).permute(0, 2, 3, 1, 4)
    return _inline(packed, kernels, bias, hw, scale, p, valid)


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
    """Depthwise 3x3 convolution with a different kernel for every sample
    (:func:`depthwise3x3`, checked).

    Args:
        v_img (Tensor): ``(B, C, H, W)``.
        kernels (Tensor): ``(B, C, 3, 3)``.

    Returns:
        Tensor: ``(B, C, H, W)``, zero padding 1.
    """
    b, c = v_img.shape[:2]
    if kernels.shape != (b, c, 3, 3):
        raise ValueError(f'kernels must be (B, C, 3, 3) = {(b, c, 3, 3)}, '
                         f'got {tuple(kernels.shape)}')
    return depthwise3x3(v_img, kernels)


# --------------------------------------------------------------------------- plain form
# The formula and the paper's ablations (the kernel phi, linear instead of InLine
# attention, windows) as plain differentiable tensor operations batched over (B x heads):
# the one form of the batched path, torch.compile, tracing/ONNX and the switches.

def _exp_kernel(t: torch.Tensor) -> torch.Tensor:
    # The official ``exp_kernel(x, t=0.2)``: exp(0.2 x).
    return (t * 0.2).exp()


def _leakyrelu_kernel(t: torch.Tensor) -> torch.Tensor:
    # The official ``nn.LeakyReLU()``: negative slope 0.01.
    return F.leaky_relu(t, 0.01)


#: the kernels phi of the official ``kernel_func`` (inline_swin.py), applied to queries and
#: keys after the qkv projection; None: the identity
KERNELS = {'identity': None, 'relu': F.relu, 'leakyrelu': _leakyrelu_kernel, 'exp': _exp_kernel}

#: the floor of the linear attention's normaliser (:func:`guard_denominator`)
LINEAR_EPS = 1e-6


def _hi(t: torch.Tensor) -> torch.Tensor:
    """fp16/bf16 -> fp32 for the statistics; fp32 and fp64 as they are."""
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def apply_kernel(kernel: str, t: torch.Tensor) -> torch.Tensor:
    """``phi(t)`` for a name of :data:`KERNELS` (the identity returns ``t`` itself)."""
    phi = KERNELS[kernel]
    return t if phi is None else phi(t)


def guard_denominator(den: torch.Tensor, eps: float = LINEAR_EPS) -> torch.Tensor:
    """``sign(den) * max(|den|, eps)`` with ``sign(0) = +1``: the linear attention's
    normaliser ``phi(q_i) . mean_j phi(k_j)`` kept away from 0 without changing its sign.

    With the identity or LeakyReLU kernel the normaliser can be 0 or negative, with ReLU
    exactly 0 (a query or all keys in the negative half-space); a plain ``+ eps`` would
    not stop a negative one from crossing 0. Where the floor applies the gradient
    through the normaliser is 0 (as with any clamp); the numerator still has its own.
    """
    floor = den.abs().clamp_min(eps)
    return torch.where(den < 0, -floor, floor)


def _v_map(v: torch.Tensor, hw: Tuple[int, int], prefix: int) -> torch.Tensor:
    """``(B, heads, N, d)`` V -> its map part as a ``(B, C, H, W)`` image (the local term's
    input; channels-last memory)."""
    b, heads, n, d = v.shape
    return _conv_cl(v[:, :, prefix:].transpose(1, 2).reshape(b, hw[0], hw[1], heads * d))


def plain_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
                    mask: Optional[torch.Tensor] = None, counts: Optional[torch.Tensor] = None,
                    attention: str = 'inline', eps: float = LINEAR_EPS) -> torch.Tensor:
    """The attention term of :func:`plain_qkv` on ``(B, heads, N, d)`` q, k, v (after
    phi; zero outside ``mask``), in token layout ``(B, N, heads * d)``."""
    b, heads, n, d = q.shape
    with _autocast_off(q):
        kf, vf = _hi(k), _hi(v)
        per = n if counts is None else counts.clamp_min(1).view(b, 1, 1, 1)
        k_mean = kf.sum(dim=2, keepdim=True) / per                       # (B, heads, 1, d)
        kv = kf.transpose(-2, -1) @ vf / per                              # (B, heads, d, d)
        if attention == 'inline':
            v_mean = vf.sum(dim=2, keepdim=True) / per
            m = ((kv - k_mean.transpose(-2, -1) @ v_mean) * scale).to(q.dtype)
            out = torch.baddbmm(v_mean.to(q.dtype).flatten(0, 1), q.flatten(0, 1),
                                m.flatten(0, 1)).view(b, heads, n, d)
        else:
            den = guard_denominator(_hi(q) @ k_mean.transpose(-2, -1), eps)   # (B, heads, N, 1)
            out = ((q @ kv.to(q.dtype)) / den).to(q.dtype)
    return out.transpose(1, 2).reshape(b, n, heads * d)


def plain_qkv(qkv: torch.Tensor, num_heads: int, hw: Tuple[int, int], scale: float,
              kernels: Optional[torch.Tensor] = None, bias: Optional[torch.Tensor] = None,
              num_prefix_tokens: int = 0, mask: Optional[torch.Tensor] = None,
              counts: Optional[torch.Tensor] = None, attention: str = 'inline',
              kernel: str = 'identity', eps: float = LINEAR_EPS) -> torch.Tensor:
    """InLine or linear attention with a kernel phi, local term included, from a
    projection's ``qkv`` output, in plain differentiable ops batched over (B x heads).

    With ``q' = phi(q)``, ``k' = phi(k)`` per head (``n``: the tokens of a sample)::

        inline:  out_i = s q'_i Cov(K', V) + mean(V)                  (InLine, eq. 5)
        linear:  out_i = q'_i S / guard(q'_i . z),  S = K'^T V / n,  z = mean(K')

    (the ``1 / n`` of ``S`` and ``z`` cancels; it keeps both bounded), then the local
    term ``DWConv3x3(V; kernels) + bias`` on the ``H x W`` map, zero padding 1
    (:func:`depthwise3x3`). ``guard`` is :func:`guard_denominator` with ``eps``.

    Args:
        qkv (Tensor): ``(B, N, 3C)``, as :func:`inline_qkv` (not written). ``B`` may be
            a batch of windows.
        num_heads, hw, scale, kernels, bias, num_prefix_tokens: As :func:`inline_qkv`.
        mask (Tensor, optional): ``(B, N)`` bool, the tokens each sample's statistics
            run over (a padded image's own, a window's part of it); q, k and v outside
            are set to 0 after phi (``exp(0) = 1`` would count otherwise), so the local
            term sees zeros there. None: all.
        counts (Tensor, optional): ``(B,)`` the tokens of ``mask`` per sample, float. A
            sample without tokens (a window wholly outside its image) divides by 1:
            its outputs are finite and meaningless (callers ignore them).
        attention (str): ``'inline'`` or ``'linear'``.
        kernel (str): A name of :data:`KERNELS`.
        eps (float): The normaliser's floor (``'linear'`` only). Default: 1e-6.

    Returns:
        Tensor: ``(B, N, C)``, before any output projection.
    """
    b, n, c3 = qkv.shape
    (h, w), p = hw, num_prefix_tokens
    if p + h * w != n:
        raise ValueError(f'{n} tokens are not {p} prefix token(s) plus a {h}x{w} map')
    if attention not in ('inline', 'linear'):
        raise ValueError(f"attention must be 'inline' or 'linear', got {attention!r}")
    c = c3 // 3
    q, k, v = qkv.reshape(b, n, 3, num_heads, c // num_heads).permute(2, 0, 3, 1, 4)
    q, k = apply_kernel(kernel, q), apply_kernel(kernel, k)
    if mask is not None:
        # where, not a product: phi of a finite value outside may be inf (exp).
        keep, zero = mask.view(b, 1, n, 1), qkv.new_zeros(())
        q, k, v = torch.where(keep, q, zero), torch.where(keep, k, zero), torch.where(keep, v, zero)
    out = plain_attention(q, k, v, scale, mask, counts, attention, eps)
    if kernels is None:
        return out
    return _add_local(out, depthwise3x3(_v_map(v, hw, p), kernels), bias, p)


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


def reference_attention(attn, x: Optional[torch.Tensor] = None,
                        hw: Optional[Tuple[int, int]] = None,
                        token_mean: Optional[torch.Tensor] = None,
                        qkv: Optional[torch.Tensor] = None) -> torch.Tensor:
    """What an :class:`~.attention.InLineAttention` ``attn`` computes, from its
    parameters and the reference functions: ``forward(x, hw, token_mean)``, or
    ``attend(qkv, hw, token_mean)`` when ``qkv`` is given."""
    if qkv is None:
        qkv = attn.qkv(x)
        token_mean = x.mean(dim=1) if token_mean is None else token_mean
    b, n, _ = qkv.shape
    c, heads, d, p = attn.dim, attn.num_heads, attn.head_dim, attn.num_prefix_tokens
    h, w = hw
    q, k, v = qkv.reshape(b, n, 3, heads, d).permute(2, 0, 3, 1, 4)
    out = reference_inline_attention(q, k, v, attn.scale).transpose(1, 2).reshape(b, n, c)
    v_img = v[:, :, p:].transpose(1, 2).reshape(b, h, w, c).permute(0, 3, 1, 2)
    kernels = attn.residual(token_mean.unsqueeze(-1)).reshape(b, c, 3, 3)
    local = reference_local_residual(v_img, kernels)
    if attn.lepe is not None:
        local = local + attn.lepe(v_img)
    out = torch.cat([out[:, :p], out[:, p:] + local.flatten(2).transpose(1, 2)], dim=1)
    return out if attn.proj is None else attn.proj(out)
