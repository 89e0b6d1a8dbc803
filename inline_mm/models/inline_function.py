"""The InLine formula, in its two forms: the plain form (differentiable tensor ops) and
the per-sample kernel (one autograd function with a hand-written backward, for the CPU).

InLine attention: injective linear attention plus a predicted local 3x3 term.

Han et al., "Bridging the Divide: Reconsidering Softmax and Linear Attention",
NeurIPS 2024 (arXiv 2412.06590).  For one head with ``n`` tokens, head dim ``d``
and scale ``s = d ** -0.5`` (identity kernel)::

    out_i = (s / n) q_i K^T V + (1 - s q_i mean(K)^T) mean(V)

The two terms fold into one product with the key/value covariance::

    out_i = q_i M + mean(V),   M = s Cov(K, V),   Cov(K, V) = K^T V / n - mean(K)^T mean(V)

InLine blocks add a depthwise 3x3 convolution of V laid out as the ``H x W`` map, with
a kernel predicted per sample from a token mean. A plain ViT (InLine-DeiT) has
``num_prefix_tokens`` tokens before the map (the class token): they take part in the
linear term, and the local term convolves and adds to the map's tokens only.

Which form runs is the attention's ``impl`` (:func:`.impl.choose_path`):

* **The plain form** (:func:`plain_qkv`): the formula as tensor operations batched over
  (B x heads), the padding as a token mask and per-image counts, the local term as one
  :func:`depthwise3x3`: no loop over the batch, no host read. It runs on every device
  but the CPU, under ``torch.compile``, tracing and export, and for the paper's switches
  (a kernel phi, linear attention, windows).
* **The kernel** (:func:`inline_kernel`): the released blocks on the CPU. It takes the
  attention's input ``x`` and its ``qkv`` projection, and folds the projection in:
  ``q M = x (W_q^T M) + b_q M`` (the queries are never made) and, with ``S = Cov(x)``
  over each image's own tokens, ``Cov(K, V)_h = W_k,h S W_v,h^T`` and
  ``mean(V) = W_v mean(x) + b_v`` (one Gram product ``x^T x`` instead of K and
  ``K^T V``; ``b_k`` has no effect on the output). V is made once, in token layout,
  which as ``(B, H, W, C)`` is the channels-last image the local term convolves
  per sample (oneDNN's depthwise kernels are several times faster so than the
  official ``(1, B * C, H, W)`` grouped convolution). Saved for the backward: ``x``
  and V. A padded image's statistics run over its own tokens (:func:`_own`), and
  its V is zero outside it, so the local term sees zeros past its border.

Both keep the ``d x d`` statistics in fp32 under fp16/bf16: their sums run over every
token of a high-resolution map, and a bounded mean in fp32 cannot overflow.
"""
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F

from .impl import is_capturing
from .padding import NO_PADDING, ValidMap, zero_outside_
from .precision import no_autocast

__all__ = ['inline_kernel', 'plain_qkv', 'plain_attention', 'inline_attention',
           'local_residual', 'depthwise3x3', 'KERNELS', 'LINEAR_EPS',
           'apply_kernel', 'guard_denominator']


def _hi(t: torch.Tensor) -> torch.Tensor:
    """fp16/bf16 -> fp32 for the statistics; fp32 and fp64 as they are."""
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def _conv_cl(x: torch.Tensor) -> torch.Tensor:
    """``(B, H, W, C)`` -> the same memory as a channels-last ``(B, C, H, W)`` view."""
    return x.permute(0, 3, 1, 2)


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


# --------------------------------------------------------------------------- the kernel
def _own(t: torch.Tensor, hw: Tuple[int, int], prefix: int, region: Tuple[int, int]
         ) -> List[torch.Tensor]:
    """One sample's ``(prefix + H*W, C)`` tokens -> views of an image's own tokens: one
    contiguous block (prefix and rows) where it spans the map's width, else its prefix
    and its ``(h, w, C)`` region."""
    h, w = region
    if w == hw[1]:
        return [t[:prefix + h * w]]
    area = t[prefix:].unflatten(0, hw)[:h, :w]
    return [t[:prefix], area] if prefix else [area]


def _local_backward(grad: torch.Tensor, v_img: torch.Tensor, kernels: torch.Tensor,
                    prefix: int, need_kernels: bool):
    """The local term's backward, per sample: each image's ``dV`` ``(H*W, C)`` (token
    layout) and the kernels' gradient ``(B, C, 3, 3)`` (or None). ``v_img``: the forward's
    channels-last V image, ``kernels`` ``(B, C, 1, 3, 3)``."""
    b, c, h, w = v_img.shape
    grad_img = _conv_cl(grad[:, prefix:].view(b, h, w, c))
    grad_v, grad_k = [], []
    for i in range(b):
        dv, dk, _ = torch.ops.aten.convolution_backward(
            grad_img[i:i + 1], v_img[i:i + 1], kernels[i], None, [1, 1], [1, 1], [1, 1],
            False, [0, 0], c, [True, need_kernels, False])
        grad_v.append(dv.permute(0, 2, 3, 1).reshape(h * w, c))
        grad_k.append(dk)
    return grad_v, (torch.stack(grad_k).view(b, c, 3, 3) if need_kernels else None)


class _InLineKernel(torch.autograd.Function):
    """InLine attention of ``x`` with its qkv projection folded in (module docstring).

    Inputs: ``x`` ``(B, N, C)``, the projection's ``weight`` ``(3C, C)`` and ``qkv_bias``
    ``(3C,)`` or None, ``kernels`` ``(B, C, 3, 3)`` or None (the local term), ``bias``
    ``(C,)`` or None (added with it: LePE's), ``hw``, ``scale``, ``heads``, ``prefix``
    (tokens before the map), and for a padded batch ``counts`` ``(B,)`` (each image's
    tokens) and ``regions`` (its ``(h, w)``), else None. Output: ``(B, N, C)``.

    Backward (``dO`` the output gradient, ``A_i = [W_q,h^T M_h]_h``, ``dA_i = dO_i^T x_i``,
    ``dc_i = colsum dO_i``): ``dx = dO A^T + x (dS + dS^T) / n + row``,
    ``dM_h = W_q,h dA_h^T + b_q,h^T dc_h``, ``dCov = s dM``,
    ``dS = sum_h W_k,h^T dCov_h W_v,h``; ``dW_q,h = M_h dA_h``, ``dW_k,h = dCov_h W_v,h S``,
    ``dW_v,h = dCov_h^T W_k,h S + dc_h^T mean(x)``; the local term's ``dV`` joins ``dx``,
    ``dW_v`` and ``db_v``.
    """

    @staticmethod
    def forward(ctx, x, weight, qkv_bias, kernels, bias, hw, scale, heads, prefix, counts,
                regions):
        b, n, c = x.shape
        d, dt, p = c // heads, x.dtype, prefix
        w_q, w_k, w_v = weight.detach().split(c)
        b_q = b_v = None
        if qkv_bias is not None:
            b_q, _, b_v = qkv_bias.detach().split(c)
        v = F.linear(x, w_v, b_v)                                           # (B, N, C)
        if regions is not None:
            zero_outside_(v[:, p:].unflatten(1, hw), regions)
        xs = _hi(x)
        if regions is None:
            x_mean = xs.sum(dim=1).div_(n)                                   # (B, C)
            cov_x = torch.bmm(xs.transpose(1, 2), xs).div_(n)                # (B, C, C)
        else:
            x_mean, cov_x = xs.new_zeros((b, c)), xs.new_zeros((b, c, c))
            for i, region in enumerate(regions):
                for part in _own(xs[i], hw, p, region):
                    part = part.reshape(-1, c)          # a strided region: its copy
                    cov_x[i].addmm_(part.t(), part)
                    x_mean[i] += part.sum(dim=0)
            x_mean.div_(counts.view(b, 1))
            cov_x.div_(counts.view(b, 1, 1))
        cov_x.sub_(x_mean.unsqueeze(2) * x_mean.unsqueeze(1))               # S = Cov(x)
        # Cov_h = W_k,h (S W_v^T)_h: one C x C x C product, then d x C x d per head.
        sv = (cov_x @ _hi(w_v).t()).view(b, c, heads, d).transpose(1, 2)    # (B, heads, C, d)
        m = (_hi(w_k).view(heads, d, c) @ sv).mul_(scale).to(dt)            # (B, heads, d, d)
        v_mean = x_mean @ _hi(w_v).t()
        if b_v is not None:
            v_mean += _hi(b_v)
        # A_i as a linear layer's (out, in) weight: row h*d + j is (M_h^T W_q,h)[j].
        w_fold = (m.transpose(-2, -1) @ w_q.view(heads, d, c)).view(b, c, c)
        c_fold = v_mean.to(dt)
        if b_q is not None:
            c_fold = c_fold + (b_q.view(1, heads, 1, d) @ m).reshape(b, c)
        if kernels is None:
            out = torch.baddbmm(c_fold.unsqueeze(1), x, w_fold.transpose(1, 2))
        else:
            kernels = kernels.to(dt).reshape(b, c, 1, 3, 3)
            v_img = _conv_cl(v[:, p:].view(b, *hw, c))
            # c_i rides along as the convolution's bias where the map is every token, and
            # the product accumulates onto the convolution's (token-layout) output.
            conv_bias = None if bias is None else bias.to(dt).expand(b, c)
            if p == 0:
                conv_bias = c_fold if conv_bias is None else c_fold + conv_bias
            outs = []
            for i in range(b):
                local = F.conv2d(v_img[i:i + 1], kernels[i], None if conv_bias is None
                                 else conv_bias[i], padding=1, groups=c)
                local = local.permute(0, 2, 3, 1).reshape(n - p, c)
                if p == 0:
                    outs.append(local.addmm_(x[i], w_fold[i].t()))
                else:
                    outs.append(torch.addmm(c_fold[i], x[i], w_fold[i].t()))
                    outs[-1][p:] += local
            out = outs[0].unsqueeze(0) if b == 1 else torch.stack(outs)
        ctx.save_for_backward(x, weight, qkv_bias, v, m, w_fold, kernels, counts, x_mean,
                              cov_x, sv)
        ctx.hw, ctx.scale, ctx.heads, ctx.prefix, ctx.regions = hw, scale, heads, prefix, regions
        ctx.has_bias = bias is not None
        return out

    @staticmethod
    def backward(ctx, grad):
        # The kernel picks its own dtypes (statistics in fp32) both ways: autocast off, also
        # when the backward runs inside an autocast region (as mmengine's train_step runs it).
        with no_autocast(grad.device.type):
            return _InLineKernel._backward(ctx, grad)

    @staticmethod
    def _backward(ctx, grad):
        x, weight, qkv_bias, v, m, w_fold, kernels, counts, x_mean, cov_x, sv = ctx.saved_tensors
        need_x, need_w, need_qb, need_kernels, need_bias = ctx.needs_input_grad[:5]
        hw, scale, heads, p, regions = ctx.hw, ctx.scale, ctx.heads, ctx.prefix, ctx.regions
        b, n, c = x.shape
        d, dt = c // heads, x.dtype
        grad = grad.contiguous()
        grad_sum = grad.sum(dim=1, dtype=cov_x.dtype)                         # (B, C): dc
        grad_x = grad_w = grad_qb = grad_kernels = grad_bias = None
        w_q, w_k, w_v = weight.detach().split(c)
        per = torch.full((b,), float(n), dtype=cov_x.dtype) if regions is None else counts

        grad_local = None
        if kernels is not None and (need_x or need_w or need_qb or need_kernels):
            grad_local, grad_kernels = _local_backward(
                grad, _conv_cl(v[:, p:].view(b, *hw, c)), kernels, p, need_kernels)
            if regions is not None:        # its V was zero outside the image
                for dv, region in zip(grad_local, regions):
                    zero_outside_(dv.view(1, *hw, c), [region])

        if need_x or need_w or need_qb:
            grad_fold = torch.bmm(grad.transpose(1, 2), x)                 # dA: (B, C, C)
            gf_h = grad_fold.view(b, heads, d, c)
            dc = grad_sum.view(b, heads, 1, d)
            dm = _hi(w_q).view(heads, d, c) @ _hi(gf_h).transpose(-2, -1)   # dM (B, heads, d, d)
            if qkv_bias is not None:
                dm += _hi(qkv_bias.detach()[:c]).view(1, heads, d, 1) * dc
            dcov = dm.mul_(scale)
            if need_x:
                # dS = sum_h W_k,h^T dCov_h W_v,h, as [W_k,h^T dCov_h]_h (C x C) times W_v.
                ds = (_hi(w_k).view(heads, d, c).transpose(-2, -1) @ dcov).transpose(1, 2) \
                    .reshape(b, c, c) @ _hi(w_v)
                ds = ds + ds.transpose(1, 2)
                # d mean(x): from mean(V) = W_v mean(x) + b_v and from S's mean(x)^T mean(x).
                row = (grad_sum @ _hi(w_v) - (x_mean.unsqueeze(1) @ ds).squeeze(1))
                row = row.div_(per.view(b, 1)).to(dt)
                ds = ds.div_(per.view(b, 1, 1)).to(dt)
                if regions is None:
                    grad_x = torch.baddbmm(row.unsqueeze(1), grad, w_fold).baddbmm_(x, ds)
                else:   # the statistics' share on each image's own tokens only
                    grad_x = torch.bmm(grad, w_fold)
                    for i, region in enumerate(regions):
                        for xp, gp in zip(_own(x[i], hw, p, region),
                                          _own(grad_x[i], hw, p, region)):
                            gp += (xp.reshape(-1, c) @ ds[i]).add_(row[i]).view(gp.shape)
                for i, dv in enumerate(grad_local or ()):
                    grad_x[i, p:].addmm_(dv, w_v)
            grad_bv = grad_sum.sum(0)
            if need_w:
                grad_w = weight.new_empty(weight.shape)
                # dW_q,h = M_h dA_h; dW_k,h = dCov_h W_v,h S; dW_v,h = dCov_h^T W_k,h S +
                # dc_h^T mean(x): each summed over the batch.
                torch.matmul(m.permute(1, 2, 0, 3).reshape(heads, d, b * d),
                             gf_h.transpose(0, 1).reshape(heads, b * d, c),
                             out=grad_w[:c].view(heads, d, c))
                # W_v,h S and W_k,h S are (S W_v^T)_h^T (the forward's) and (S W_k^T)_h^T.
                sk = (cov_x @ _hi(w_k).t()).view(b, c, heads, d).transpose(1, 2)
                grad_w[c:2 * c] = (dcov @ sv.transpose(-2, -1)).sum(0).view(c, c)
                dwv = (dcov.transpose(-2, -1) @ sk.transpose(-2, -1)).sum(0).view(c, c)
                grad_w[2 * c:] = dwv.addmm_(grad_sum.t(), x_mean)
                for i, dv in enumerate(grad_local or ()):
                    grad_w[2 * c:].addmm_(dv.t(), x[i, p:])
            if need_qb and qkv_bias is not None:
                grad_qb = qkv_bias.new_zeros(qkv_bias.shape)
                # db_q,h = dc_h M_h^T; db_k = 0 (b_k has no effect); db_v = dc + local dV.
                grad_qb[:c] = (dc.to(dt) @ m.transpose(-2, -1)).sum(0).reshape(c)
                for dv in grad_local or ():
                    grad_bv += dv.sum(0, dtype=grad_bv.dtype)
                grad_qb[2 * c:] = grad_bv
        if need_bias and ctx.has_bias:
            grad_bias = grad_sum if p == 0 else grad[:, p:].sum(dim=1, dtype=grad_sum.dtype)
            grad_bias = grad_bias.sum(0)
        return (grad_x, grad_w, grad_qb, grad_kernels, grad_bias) + (None,) * 6


def inline_kernel(x: torch.Tensor, weight: torch.Tensor, qkv_bias: Optional[torch.Tensor],
                  num_heads: int, hw: Tuple[int, int], scale: float,
                  kernels: Optional[torch.Tensor] = None, bias: Optional[torch.Tensor] = None,
                  num_prefix_tokens: int = 0, valid: ValidMap = NO_PADDING) -> torch.Tensor:
    """InLine attention (identity kernel, local term included) of ``F.linear(x, weight,
    qkv_bias)``, by the per-sample kernel (module docstring).

    Args:
        x (Tensor): ``(B, N, C)``, ``N = num_prefix_tokens + H*W``.
        weight (Tensor): ``(3C, C)`` the qkv projection (queries, keys, values, heads
            contiguous within each); ``qkv_bias`` ``(3C,)`` or None.
        num_heads, hw, scale: Heads (dividing ``C``), the map ``(H, W)``, ``s``.
        kernels (Tensor, optional): ``(B, C, 3, 3)`` local kernels; None: no local term.
        bias (Tensor, optional): ``(C,)`` added with the local term (LePE's bias).
        num_prefix_tokens (int): Tokens before the map: in the linear term, outside the
            local one. Default: 0.
        valid (ValidMap): Each image's region of a padded batch, its sizes on the host;
            tokens outside may hold anything finite. Default: ``NO_PADDING``.

    Returns:
        Tensor: ``(B, N, C)``, before any output projection.
    """
    b, n, c = x.shape
    p = num_prefix_tokens
    _check_map(n, hw, p, valid)
    if weight.shape != (3 * c, c):
        raise ValueError(f'weight must be (3C, C) = {(3 * c, c)}, got {tuple(weight.shape)}')
    regions = None
    if valid.is_padded:
        if valid.sizes is None:
            raise ValueError("the InLine kernel needs the images' sizes on the host: give "
                             "ValidMap Python (h, w) pairs, or run impl='plain'")
        regions = tuple(valid.sizes)
    return _InLineKernel.apply(x, weight, qkv_bias, kernels, bias, tuple(hw), scale, num_heads,
                               p, valid.counts if regions else None, regions)


# --------------------------------------------------------------------------- plain form
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


def plain_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
                    counts: Optional[torch.Tensor] = None, attention: str = 'inline',
                    eps: float = LINEAR_EPS) -> torch.Tensor:
    """The attention term of :func:`plain_qkv` on ``(B, heads, N, d)`` q, k, v (after
    phi; zero outside each image), in token layout ``(B, N, heads * d)``."""
    b, heads, n, d = q.shape
    device = q.device.type
    with no_autocast(device):
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
        qkv (Tensor): ``(B, N, 3C)`` queries, keys, values (in that order along the
            last axis, heads contiguous within each), ``N = num_prefix_tokens + H*W``;
            not written. ``B`` may be a batch of windows.
        num_heads (int): Heads; must divide ``C``.
        hw (tuple[int, int]): The map size ``(H, W)``.
        scale (float): ``s`` of the formula.
        kernels (Tensor, optional): ``(B, C, 3, 3)`` local kernels; None: no local term.
        bias (Tensor, optional): ``(C,)`` added with the local term (LePE's bias).
        num_prefix_tokens (int): Tokens before the map (a class token): in the linear
            term, outside the local one. Default: 0.
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
    p = num_prefix_tokens
    if p + hw[0] * hw[1] != n:
        raise ValueError(f'{n} tokens do not form a {hw[0]}x{hw[1]} map' if p == 0 else
                         f'{n} tokens are not {p} prefix token(s) plus a {hw[0]}x{hw[1]} map')
    if attention not in ('inline', 'linear'):
        raise ValueError(f"attention must be 'inline' or 'linear', got {attention!r}")
    c = c3 // 3
    q, k, v = qkv.reshape(b, n, 3, num_heads, c // num_heads).permute(2, 0, 3, 1, 4)
    q, k = apply_kernel(kernel, q), apply_kernel(kernel, k)
    if mask is not None:
        # where, not a product: phi of a finite value outside may be inf (exp).
        keep, zero = mask.view(b, 1, n, 1), qkv.new_zeros(())
        q, k, v = torch.where(keep, q, zero), torch.where(keep, k, zero), torch.where(keep, v, zero)
    out = plain_attention(q, k, v, scale, counts, attention, eps)
    if kernels is None:
        return out
    # V's map part as a (B, C, H, W) image (channels-last memory).
    v_img = _conv_cl(v[:, :, p:].transpose(1, 2).reshape(b, hw[0], hw[1], c))
    local = depthwise3x3(v_img, kernels).permute(0, 2, 3, 1).reshape(b, n - p, c)
    if bias is not None:
        local = local + bias.to(local.dtype)
    return torch.cat([out[:, :p], out[:, p:] + local], dim=1) if p else out + local


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
    out = plain_attention(q, k, v, d ** -0.5 if scale is None else scale)
    return out.view(b, n, heads, d).transpose(1, 2)


def depthwise3x3(x_img: torch.Tensor, kernels: torch.Tensor) -> torch.Tensor:
    """Depthwise 3x3 convolution, zero padding 1, with a kernel per sample and no loop
    over the batch: the plain form's local term.

    ``x_img`` ``(B, C, H, W)``, ``kernels`` ``(B, C, 3, 3)`` -> ``(B, C, H, W)``. Eager:
    one grouped convolution with ``groups = B * C`` (one launch). Compiled, traced or
    exported: nine shifted multiply-adds, which Inductor fuses into one kernel and ONNX
    records with the batch free (its convolution's group count cannot follow the batch,
    and Inductor compiles a symbolic group count for minutes).
    """
    b, c, h, w = x_img.shape
    kernels = kernels.to(x_img.dtype)
    if is_capturing():
        xp = F.pad(x_img, (1, 1, 1, 1))
        out = None
        for dy in range(3):
            for dx in range(3):
                term = xp[:, :, dy:dy + h, dx:dx + w] * kernels[:, :, dy, dx, None, None]
                out = term if out is None else out + term
        return out
    out = F.conv2d(x_img.reshape(1, b * c, h, w), kernels.reshape(b * c, 1, 3, 3),
                   padding=1, groups=b * c)
    return out.view(b, c, h, w)


def local_residual(v_img: torch.Tensor, kernels: torch.Tensor) -> torch.Tensor:
    """:func:`depthwise3x3` with its arguments checked: ``v_img`` ``(B, C, H, W)``,
    ``kernels`` ``(B, C, 3, 3)`` -> ``(B, C, H, W)``, zero padding 1."""
    b, c = v_img.shape[:2]
    if kernels.shape != (b, c, 3, 3):
        raise ValueError(f'kernels must be (B, C, 3, 3) = {(b, c, 3, 3)}, '
                         f'got {tuple(kernels.shape)}')
    return depthwise3x3(v_img, kernels)
