"""InLine attention: the production kernel against a plain transcription of the formula.

The ``reference_*`` functions (``inline_mm.models.attention``) are the formula of Han et
al., "Bridging the Divide: Reconsidering Softmax and Linear Attention" (NeurIPS 2024,
arXiv 2412.06590, eq. 5 with the ``s / n`` scale of the official code), written term by
term with autograd doing the backward.  ``python -m benchmarks --attention`` times the
production path against exactly these functions.
"""
import pytest
import torch
from conftest import rel_err

from inline_mm.models import InLineAttention, InLineSwin, inline_attention, local_residual
from inline_mm.models.inline_function import (_inline, inline_folded, inline_qkv,
                                              reference_attention, reference_inline_attention,
                                              reference_local_residual)
from inline_mm.models.padding import NO_PADDING, ValidMap


def _stir(module, gain=3.0):
    """Random weights (``gain`` / sqrt(fan-in)) and biases (``gain`` / 10), so that
    the local term is as strong as the global one and every part shows."""
    with torch.no_grad():
        for p in module.parameters():
            std = gain / (p[0].numel() ** 0.5) if p.dim() > 1 else gain / 10
            p.copy_(torch.randn_like(p) * std)
    return module


def _grads(out, grad, *tensors):
    return torch.autograd.grad(out, tensors, grad, allow_unused=False)


def _assert_close(ours, ref, tol=1e-5):
    for i, (a, b) in enumerate(zip(ours, ref)):
        assert a.shape == b.shape, i
        assert rel_err(a, b) <= tol, (i, rel_err(a, b))


# (B, H, W, C, heads): non-square maps, one and several heads, batch > 1
CASES = [(2, 7, 11, 64, 2), (1, 13, 5, 96, 3), (3, 8, 8, 32, 1), (2, 1, 9, 48, 3)]


@pytest.mark.parametrize('b,h,w,c,heads', CASES)
def test_module_matches_reference(b, h, w, c, heads):
    attn = _stir(InLineAttention(c, heads))
    x = torch.randn(b, h * w, c, requires_grad=True)
    g = torch.randn(b, h * w, c)
    params = list(attn.parameters())
    ours = attn(x, (h, w))
    ref = reference_attention(attn, x, (h, w))
    _assert_close([ours], [ref])
    _assert_close(_grads(ours, g, x, *params), _grads(ref, g, x, *params))


def test_explicit_token_mean_matches_reference():
    attn = _stir(InLineAttention(64, 2))
    x = torch.randn(2, 6 * 10, 64, requires_grad=True)
    mean = torch.randn(2, 64, requires_grad=True)
    g = torch.randn(2, 60, 64)
    ours = attn(x, (6, 10), token_mean=mean)
    ref = reference_attention(attn, x, (6, 10), token_mean=mean)
    _assert_close([ours], [ref])
    _assert_close(_grads(ours, g, x, mean), _grads(ref, g, x, mean))


def test_attend_with_lepe_matches_reference():
    """InLine-CSwin's use: projections in the block, LePE on, block-input mean."""
    attn = _stir(InLineAttention(64, 2, proj=False, lepe=True))
    qkv = torch.randn(2, 9 * 7, 192, requires_grad=True)
    mean = torch.randn(2, 64, requires_grad=True)
    g = torch.randn(2, 63, 64)
    params = list(attn.parameters())
    ours = attn.attend(qkv, (9, 7), mean)
    ref = reference_attention(attn, hw=(9, 7), token_mean=mean, qkv=qkv)
    _assert_close([ours], [ref])
    _assert_close(_grads(ours, g, qkv, mean, *params), _grads(ref, g, qkv, mean, *params))


def test_attend_accepts_a_strided_qkv():
    """A channel slice of a wider tensor (as a branch of a block may pass) works."""
    attn = _stir(InLineAttention(32, 1, proj=False))
    wide = torch.randn(2, 20, 200, requires_grad=True)
    mean = torch.randn(2, 32)
    g = torch.randn(2, 20, 32)
    ours = attn.attend(wide[..., 8:104], (4, 5), mean)
    ref = reference_attention(attn, hw=(4, 5), token_mean=mean, qkv=wide[..., 8:104])
    _assert_close([ours], [ref])
    _assert_close(_grads(ours, g, wide), _grads(ref, g, wide))


def test_functional_matches_reference():
    q, k, v = (torch.randn(2, 3, 50, 16, requires_grad=True) for _ in range(3))
    g = torch.randn(2, 3, 50, 16)
    ours = inline_attention(q, k, v)
    ref = reference_inline_attention(q, k, v, 16 ** -0.5)
    _assert_close([ours], [ref])
    _assert_close(_grads(ours, g, q, k, v), _grads(ref, g, q, k, v))


@pytest.mark.parametrize('prefix', [0, 1])
@pytest.mark.parametrize('padded', [False, True], ids=['unpadded', 'padded'])
def test_plain_form_matches_kernel(padded, prefix):
    """The plain form (the batched path, torch.compile, export, the switches) against the
    per-sample kernel, on the same map, gradients included."""
    b, heads, h, w, d = 3, 3, 5, 7, 16
    c, n = heads * d, prefix + h * w
    qkv = torch.randn(b, n, 3 * c, requires_grad=True)
    kernels = torch.randn(b, c, 3, 3, requires_grad=True)
    bias = torch.randn(c, requires_grad=True)
    g = torch.randn(b, n, c)
    sizes = [(5, 7), (3, 4), (1, 6)]
    maps = [ValidMap((h, w), sizes, prefix=prefix),
            ValidMap((h, w), torch.tensor(sizes), prefix=prefix)] if padded \
        else [NO_PADDING.on_path(False), NO_PADDING.on_path(True)]
    outs, grads = [], []
    for valid in maps:
        packed = qkv.reshape(b, n, 3, heads, d).permute(0, 2, 3, 1, 4)
        out = _inline(packed, kernels, bias, (h, w), d ** -0.5, prefix, valid)
        if padded:
            # Only each image's own tokens are defined (and their gradients).
            out = valid.zero(out)
        outs.append(out)
        grads.append(_grads(out, g, qkv, kernels, bias))
    _assert_close(outs[1:], outs[:1])
    if padded:
        grads = [(maps[0].zero(gq.view(b, n, 3 * c)), gk, gb) for gq, gk, gb in grads]
    _assert_close(grads[1], grads[0])


@pytest.mark.parametrize('gram', [True, False], ids=['gram', 'keys'])
@pytest.mark.parametrize('b', [1, 4])
@pytest.mark.parametrize('prefix', [0, 1])
@pytest.mark.parametrize('padded', [False, True], ids=['unpadded', 'padded'])
def test_folded_projection_matches_kernel(padded, prefix, b, gram):
    """The qkv projection folded into the kernel (q M = x (W_q^T M) + b_q M; the module's
    default on the per-sample path) against the kernel on the projection's output:
    output and every gradient (x, weight, bias, kernels, LePE bias), with and without the
    local term, with the statistics from x's covariance and from the keys."""
    heads, h, w, d = 3, 5, 7, 8
    c, n = heads * d, prefix + h * w
    x = torch.randn(b, n, c, requires_grad=True)
    weight = torch.randn(3 * c, c, requires_grad=True)
    qkv_bias = torch.randn(3 * c, requires_grad=True)
    g = torch.randn(b, n, c)
    # padded: an image that fills the map, one as its region, one as its rows less the
    # strip to its right, one as whole rows (_own_tokens)
    valid = ValidMap((h, w), [(5, 7), (3, 4), (1, 6), (2, 7)][:b], prefix=prefix) if padded \
        else NO_PADDING.on_path(False)
    for local in (True, False):
        kernels = torch.randn(b, c, 3, 3, requires_grad=True) if local else None
        bias = torch.randn(c, requires_grad=True) if local else None
        leaves = [t for t in (x, weight, qkv_bias, kernels, bias) if t is not None]
        outs, grads = [], []
        for fold in (True, False):
            if fold:
                out = inline_folded(x, weight, qkv_bias, heads, (h, w), d ** -0.5, kernels,
                                    bias, prefix, valid, gram=gram)
            else:
                out = inline_qkv(torch.nn.functional.linear(x, weight, qkv_bias), heads,
                                 (h, w), d ** -0.5, kernels, bias, prefix, valid)
            out = valid.zero(out) if padded else out
            outs.append(out)
            grads.append(_grads(out, g, *leaves))
        _assert_close(outs[:1], outs[1:])
        _assert_close(grads[0], grads[1])


@pytest.mark.parametrize('prefix', [0, 2])
def test_own_tokens_are_each_images_tokens(prefix):
    """The parts the padded covariance fold sums over (signed) are an image's own tokens
    and its prefix, whatever the region: as its rows, its rows less the strip to their
    right, or the region itself."""
    from inline_mm.models.inline_function import _own_tokens
    hw, c = (6, 9), 3
    t = torch.randn(prefix + hw[0] * hw[1], c, dtype=torch.float64)
    shapes = set()
    for region in [(6, 9), (4, 9), (6, 8), (3, 1), (5, 5), (1, 9), (2, 7)]:
        parts = _own_tokens(t, hw, prefix, region)
        shapes.add(tuple(sign for sign, _ in parts))
        got = sum(sign * part.reshape(-1, c).sum(0) for sign, part in parts)
        inside = t[prefix:].view(*hw, c)[:region[0], :region[1]].reshape(-1, c)
        torch.testing.assert_close(got, inside.sum(0) + t[:prefix].sum(0))
        gram = sum(sign * part.reshape(-1, c).t() @ part.reshape(-1, c) for sign, part in parts)
        whole = torch.cat([t[:prefix], inside])
        torch.testing.assert_close(gram, whole.t() @ whole)
    assert {(1,), (1, -1)} <= shapes and ((1, 1) in shapes) == bool(prefix), shapes


def test_module_folds_only_where_it_may():
    """The fold is the module's forward on the per-sample path for InLine attention with
    the identity kernel; a switched kernel, the batched path, autocast, a hook on the
    projection or a wrapped ``_attend`` (the attention-map capture) take the projection
    output."""
    x = torch.randn(2, 20, 32)
    attn = InLineAttention(32, 2)
    assert attn._folds(x, NO_PADDING.on_path(False))
    assert not attn._folds(x, NO_PADDING.on_path(True))
    assert not InLineAttention(32, 2, kernel='relu')._folds(x, NO_PADDING.on_path(False))
    with torch.autocast('cpu', dtype=torch.bfloat16):
        assert not attn._folds(x, NO_PADDING.on_path(False))
    handle = attn.qkv.register_forward_hook(lambda *a: None)
    assert not attn._folds(x, NO_PADDING.on_path(False))
    handle.remove()
    seen = []
    original = attn._attend
    attn._attend = lambda qkv, *a: seen.append(qkv.shape) or original(qkv, *a)
    attn(x, (4, 5))
    assert seen == [(2, 20, 96)]


def test_partial_gradients():
    """Frozen projections / frozen kernel predictor: only the needed gradients."""
    attn = _stir(InLineAttention(32, 2))
    x = torch.randn(2, 4 * 6, 32, requires_grad=True)
    g = torch.randn(2, 24, 32)
    attn.residual.requires_grad_(False)
    _assert_close(_grads(attn(x, (4, 6)), g, x), _grads(reference_attention(attn, x, (4, 6)), g, x))
    attn.residual.requires_grad_(True)
    attn.qkv.requires_grad_(False)
    x = x.detach()
    w = attn.residual[2].weight
    _assert_close(_grads(attn(x, (4, 6)), g, w), _grads(reference_attention(attn, x, (4, 6)), g, w))


def test_local_residual_matches_grouped_conv():
    v_img = torch.randn(3, 8, 5, 9, requires_grad=True)
    kernels = torch.randn(3, 8, 3, 3, requires_grad=True)
    g = torch.randn(3, 8, 5, 9)
    ours = local_residual(v_img, kernels)
    ref = reference_local_residual(v_img, kernels)
    assert ours.is_contiguous()
    _assert_close([ours], [ref])
    _assert_close(_grads(ours, g, v_img, kernels), _grads(ref, g, v_img, kernels))


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
def test_autocast_does_not_overflow(dtype):
    """Large activations over many tokens: the plain formula's fp16 sum K^T V reaches
    ~1e7 (fp16 max 65504) and overflows; the fp32 statistics keep the result finite
    and close to fp32, in the forward and the backward."""
    torch.manual_seed(3)
    attn = _stir(InLineAttention(64, 2), gain=1.0)
    with torch.no_grad():
        attn.qkv.bias.fill_(20.)
    x = torch.randn(1, 64 * 64, 64) * 3
    g = torch.randn(1, 64 * 64, 64)
    x32 = x.clone().requires_grad_()
    ref = attn(x32, (64, 64))
    ref.backward(g)
    xl = x.clone().requires_grad_()
    with torch.autocast('cpu', dtype=dtype):
        out = attn(xl, (64, 64))
        plain = reference_attention(attn, x, (64, 64))
    assert out.dtype == dtype
    if dtype == torch.float16:
        assert not torch.isfinite(plain).all()      # the hazard is real
    out.float().backward(g)
    assert torch.isfinite(out).all() and torch.isfinite(xl.grad).all()
    assert rel_err(out, ref) < 3e-2
    assert rel_err(xl.grad, x32.grad) < 5e-2


def test_bad_input_raises():
    attn = InLineAttention(32, 2)
    with pytest.raises(ValueError, match='do not form a 5x5 map'):
        attn(torch.randn(1, 24, 32), (5, 5))
    with pytest.raises(ValueError, match='expected 3 \\* 32'):
        attn.attend(torch.randn(1, 25, 64), (5, 5), torch.randn(1, 32))
    with pytest.raises(RuntimeError, match='call attend'):
        InLineAttention(32, 2, proj=False)(torch.randn(1, 25, 32), (5, 5))
    with pytest.raises(ValueError, match='one \\(B, heads, N, d\\) shape'):
        inline_attention(torch.randn(1, 2, 5, 4), torch.randn(1, 2, 6, 4), torch.randn(1, 2, 5, 4))
    with pytest.raises(ValueError, match='kernels must be'):
        local_residual(torch.randn(2, 4, 5, 5), torch.randn(2, 4, 9))


SMALL_SWIN = dict(embed_dims=16, depths=(1, 1, 1, 1), num_heads=(1, 2, 4, 8),
                  stage_types=('inline', 'inline', 'inline', 'softmax'), drop_path_rate=0.)


def _loss_and_grads(model, x):
    x = x.clone().requires_grad_()
    outs = model(x)
    loss = sum((o * torch.linspace(-1, 1, o.numel()).view_as(o)).sum() for o in outs)
    loss.backward()
    return outs, x.grad


def test_compile_backbone_trains_like_eager():
    """Dynamo captures the whole backbone in one graph (no break in the attention) and
    AOTAutograd's backward matches eager.  The ``aot_eager`` backend runs that same
    graph pair without Inductor's code generation, which costs ~100 s per backward
    graph on a 2-core machine; Inductor itself is exercised by the next test."""
    torch._dynamo.reset()
    model = InLineSwin(**SMALL_SWIN)
    x = torch.randn(2, 3, 40, 56)
    eager, eager_grad = _loss_and_grads(model, x)
    model.zero_grad()
    compiled = torch.compile(model, backend='aot_eager', fullgraph=True)
    outs, grad = _loss_and_grads(compiled, x)
    _assert_close(outs, eager)
    _assert_close([grad], [eager_grad])


@pytest.mark.subprocess     # inductor compiles its C++ kernels with the system's g++
def test_compile_inductor_inference_matches_eager():
    torch._dynamo.reset()
    model = InLineSwin(embed_dims=16, depths=(1, 1), num_heads=(1, 2),
                       stage_types=('inline', 'softmax'), drop_path_rate=0.,
                       out_indices=(0, 1)).eval()
    x = torch.randn(2, 3, 36, 44)
    with torch.no_grad():
        eager = model(x)
        outs = torch.compile(model, fullgraph=True)(x)
    _assert_close(outs, eager, tol=1e-5)
