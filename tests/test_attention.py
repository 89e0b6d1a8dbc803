"""InLine attention: both forms (the kernel and the plain form) against the formula
written out.

``benchmarks/reference.py`` is the formula of Han et al., "Bridging the Divide:
Reconsidering Softmax and Linear Attention" (NeurIPS 2024, arXiv 2412.06590, eq. 5 with
the ``s / n`` scale of the official code), term by term, with autograd doing the backward;
``python -m benchmarks --attention`` times the package against it.
"""
import threading

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode
from conftest import rel_err

from benchmarks import reference
from inline_mm.models import InLineAttention, InLineSwin, inline_attention, local_residual
from inline_mm.models.attention import record_calls
from inline_mm.models.inline_function import _own, depthwise3x3, inline_kernel, plain_qkv
from inline_mm.models.padding import NO_PADDING, ValidMap
from support import stir

IMPLS = ('kernel', 'plain')


def _grads(out, grad, *tensors):
    return torch.autograd.grad(out, tensors, grad, allow_unused=False)


def _assert_close(ours, ref, tol=1e-5):
    for i, (a, b) in enumerate(zip(ours, ref)):
        assert a.shape == b.shape, i
        assert rel_err(a, b) <= tol, (i, rel_err(a, b))


# (B, H, W, C, heads): non-square maps, one and several heads, batch > 1
CASES = [(2, 7, 11, 64, 2), (1, 13, 5, 96, 3), (3, 8, 8, 32, 1), (2, 1, 9, 48, 3)]


@pytest.mark.parametrize('impl', IMPLS)
@pytest.mark.parametrize('b,h,w,c,heads', CASES)
def test_module_matches_the_formula(b, h, w, c, heads, impl):
    attn = stir(InLineAttention(c, heads, impl=impl))
    x = torch.randn(b, h * w, c, requires_grad=True)
    assert attn.uses_kernel(x) == (impl == 'kernel')
    g = torch.randn(b, h * w, c)
    params = list(attn.parameters())
    ours = attn(x, (h, w))
    ref = reference.attention(attn, x, (h, w))
    _assert_close([ours], [ref])
    _assert_close(_grads(ours, g, x, *params), _grads(ref, g, x, *params))


@pytest.mark.parametrize('impl', IMPLS)
def test_explicit_token_mean_matches_the_formula(impl):
    attn = stir(InLineAttention(64, 2, impl=impl))
    x = torch.randn(2, 6 * 10, 64, requires_grad=True)
    mean = torch.randn(2, 64, requires_grad=True)
    g = torch.randn(2, 60, 64)
    ours = attn(x, (6, 10), token_mean=mean)
    ref = reference.attention(attn, x, (6, 10), token_mean=mean)
    _assert_close([ours], [ref])
    _assert_close(_grads(ours, g, x, mean), _grads(ref, g, x, mean))


@pytest.mark.parametrize('impl', IMPLS)
def test_the_blocks_projection_with_lepe_matches_the_formula(impl):
    """InLine-CSwin's use: the projection is the block's, LePE on, the block-input mean."""
    attn = stir(InLineAttention(64, 2, proj=False, lepe=True, impl=impl))
    projection = stir(torch.nn.Linear(64, 192))
    x = torch.randn(2, 9 * 7, 64, requires_grad=True)
    mean = torch.randn(2, 64, requires_grad=True)
    g = torch.randn(2, 63, 64)
    params = list(attn.parameters()) + list(projection.parameters())
    ours = attn(x, (9, 7), mean, projection=projection)
    ref = reference.attention(attn, x, (9, 7), mean, projection=projection)
    _assert_close([ours], [ref])
    _assert_close(_grads(ours, g, x, mean, *params), _grads(ref, g, x, mean, *params))


def test_functional_matches_the_formula():
    q, k, v = (torch.randn(2, 3, 50, 16, requires_grad=True) for _ in range(3))
    g = torch.randn(2, 3, 50, 16)
    ours = inline_attention(q, k, v)
    ref = reference.inline_attention(q, k, v, 16 ** -0.5)
    _assert_close([ours], [ref])
    _assert_close(_grads(ours, g, q, k, v), _grads(ref, g, q, k, v))


@pytest.mark.parametrize('b', [1, 4])
@pytest.mark.parametrize('prefix', [0, 1])
@pytest.mark.parametrize('padded', [False, True], ids=['unpadded', 'padded'])
def test_kernel_matches_the_plain_form(padded, prefix, b):
    """The kernel (projection folded in, statistics from x's covariance over each image's
    own tokens) against the plain form on the projection's output, on the same map:
    output and every gradient (x, weight, bias, kernels, LePE bias), with and without the
    local term. Padded: an image that fills the map, one as its region, one as a strip,
    one as whole rows (:func:`_own`)."""
    heads, h, w, d = 3, 5, 7, 8
    c, n = heads * d, prefix + h * w
    x = torch.randn(b, n, c, requires_grad=True)
    weight = torch.randn(3 * c, c, requires_grad=True)
    qkv_bias = torch.randn(3 * c, requires_grad=True)
    g = torch.randn(b, n, c)
    valid = ValidMap((h, w), [(5, 7), (3, 4), (1, 6), (2, 7)][:b], prefix=prefix) if padded \
        else NO_PADDING
    for local in (True, False):
        kernels = torch.randn(b, c, 3, 3, requires_grad=True) if local else None
        bias = torch.randn(c, requires_grad=True) if local else None
        leaves = [t for t in (x, weight, qkv_bias, kernels, bias) if t is not None]
        outs, grads = [], []
        for kernel in (True, False):
            if kernel:
                out = inline_kernel(x, weight, qkv_bias, heads, (h, w), d ** -0.5, kernels,
                                    bias, prefix, valid)
            else:
                out = plain_qkv(F.linear(x, weight, qkv_bias), heads, (h, w), d ** -0.5,
                                kernels, bias, prefix, valid.mask, valid.counts)
            out = valid.zero(out)      # only each image's own tokens are defined
            outs.append(out)
            grads.append(_grads(out, g, *leaves))
        _assert_close(outs[:1], outs[1:])
        _assert_close(grads[0], grads[1])


@pytest.mark.parametrize('prefix', [0, 2])
def test_own_tokens_are_each_images_tokens(prefix):
    hw, c = (6, 9), 3
    t = torch.randn(prefix + hw[0] * hw[1], c, dtype=torch.float64)
    for region in [(6, 9), (4, 9), (6, 8), (3, 1), (5, 5), (1, 9)]:
        parts = _own(t, hw, prefix, region)
        got = torch.cat([part.reshape(-1, c) for part in parts])
        inside = t[prefix:].view(*hw, c)[:region[0], :region[1]].reshape(-1, c)
        torch.testing.assert_close(got, torch.cat([t[:prefix], inside]))
        assert len(parts) == (1 if region[1] == hw[1] or not prefix else 2)


def test_the_path_is_configuration_only():
    """The kernel runs the released settings where impl resolves to it; a switched
    kernel, linear attention, windows, impl='plain' or another device take the plain
    form; a hook or a dispatch mode changes nothing."""
    x = torch.randn(2, 20, 32)
    attn = InLineAttention(32, 2, impl='auto')
    assert attn.uses_kernel(x) and 'impl=' in repr(attn)
    assert not InLineAttention(32, 2, impl='plain').uses_kernel(x)
    # sizes on the device (a map of the plain path): the kernel needs them on the host
    assert not attn.uses_kernel(x, ValidMap((4, 5), torch.tensor([[4, 5], [3, 5]])))
    assert not attn.uses_kernel(x.to('meta'), NO_PADDING)
    for switched in (dict(kernel='relu'), dict(attention='linear'), dict(window_size=2)):
        assert not InLineAttention(32, 2, **switched).uses_kernel(x)
    # Under autocast the kernel runs in the autocast dtype; outside it, x must be in the
    # projection's.
    with torch.autocast('cpu', dtype=torch.bfloat16):
        assert attn.uses_kernel(x) and attn.uses_kernel(x.bfloat16())
        assert not attn.uses_kernel(x.half())
    assert not attn.uses_kernel(x.bfloat16())
    handle = attn.qkv.register_forward_hook(lambda *a: None)
    assert attn.uses_kernel(x)
    handle.remove()
    with FlopCounterMode(display=False):
        assert attn.uses_kernel(x)
    with pytest.raises(ValueError, match="impl='fast'; allowed: 'auto', 'plain', 'kernel'"):
        InLineAttention(32, 2, impl='fast')


def test_a_record_is_the_callers_not_the_modules():
    """record_calls keeps the calls of its own thread only: another thread's forward on the
    same module, run while this one's block is open (forced: it runs between this thread's
    two calls), is neither kept here nor kept anywhere else; outside a block nothing is
    kept; blocks nest."""
    attn = InLineAttention(32, 2)
    mine, theirs = torch.randn(1, 20, 32), torch.randn(1, 20, 32)
    other_calls = []

    def other_user():
        with record_calls(attn) as other:
            attn(theirs, (4, 5))
        other_calls.extend(other.calls(attn))

    with record_calls(attn) as record:
        attn(mine, (4, 5))
        worker = threading.Thread(target=other_user)
        worker.start()
        worker.join()
        with record_calls(attn) as inner:
            attn(mine, (5, 4))
    assert [c.x is mine for c in record.calls(attn)] == [True, True]
    assert [c.hw for c in record.calls(attn)] == [(4, 5), (5, 4)]
    assert [c.hw for c in inner.calls(attn)] == [(5, 4)]
    assert len(other_calls) == 1 and other_calls[0].x is theirs
    assert record.last(attn).hw == (5, 4)
    with record_calls() as empty:
        attn(mine, (4, 5))
    with pytest.raises(KeyError, match='pass it to record_calls'):
        empty.calls(attn)
    assert not hasattr(attn, 'last_call')


def test_the_environment_sets_the_default(monkeypatch):
    monkeypatch.setenv('INLINE_MM_IMPL', 'plain')
    assert InLineAttention(32, 2).impl == 'plain'
    assert InLineSwin(**SMALL_SWIN).impl == 'plain'
    assert InLineSwin(**SMALL_SWIN, impl='kernel').impl == 'kernel'
    monkeypatch.setenv('INLINE_MM_IMPL', 'gpu')
    with pytest.raises(ValueError, match="INLINE_MM_IMPL='gpu'"):
        InLineAttention(32, 2)


def test_batched_is_the_older_name_of_impl():
    model = InLineSwin(**SMALL_SWIN, batched=True)
    assert model.impl == 'plain' and model.batched is True
    model.batched = False
    assert model.impl == 'kernel'
    assert {m.impl for m in model.modules() if isinstance(m, InLineAttention)} == {'kernel'}
    with pytest.raises(ValueError, match='give one of them'):
        InLineSwin(**SMALL_SWIN, batched=True, impl='kernel')


@pytest.mark.parametrize('impl', IMPLS)
def test_partial_gradients(impl):
    """Frozen projections / frozen kernel predictor: only the needed gradients."""
    attn = stir(InLineAttention(32, 2, impl=impl))
    x = torch.randn(2, 4 * 6, 32, requires_grad=True)
    g = torch.randn(2, 24, 32)
    attn.residual.requires_grad_(False)
    _assert_close(_grads(attn(x, (4, 6)), g, x), _grads(reference.attention(attn, x, (4, 6)), g, x))
    attn.residual.requires_grad_(True)
    attn.qkv.requires_grad_(False)
    x = x.detach()
    w = attn.residual[2].weight
    _assert_close(_grads(attn(x, (4, 6)), g, w),
                  _grads(reference.attention(attn, x, (4, 6)), g, w))


def _depthwise_written_out(x_img, kernels):
    """Each output pixel as the sum of its 3x3 neighbourhood (zero padding) times the
    sample's kernel, through ``F.unfold``'s patches."""
    b, c, h, w = x_img.shape
    patches = F.unfold(x_img.double(), 3, padding=1).view(b, c, 9, h * w)
    return torch.einsum('bckn,bck->bcn', patches, kernels.double().view(b, c, 9)).view(b, c, h, w)


def test_local_term_is_the_depthwise_convolution_written_out():
    """Eager (one grouped convolution) and traced (nine shifted multiply-adds, the form of
    compile and export) against the convolution written out, values and gradients."""
    v_img = torch.randn(3, 8, 5, 9, requires_grad=True)
    kernels = torch.randn(3, 8, 3, 3, requires_grad=True)
    g = torch.randn(3, 8, 5, 9)
    traced = torch.jit.trace(depthwise3x3, (v_img, kernels), check_trace=False)
    for ours in (local_residual(v_img, kernels), traced(v_img, kernels)):
        ref = _depthwise_written_out(v_img, kernels)
        _assert_close([ours], [ref.float()])
        _assert_close(_grads(ours, g, v_img, kernels), _grads(ref, g.double(), v_img, kernels))


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
def test_autocast_does_not_overflow(dtype):
    """Large activations over many tokens: the plain formula's fp16 sum K^T V reaches
    ~1e7 (fp16 max 65504) and overflows; the fp32 statistics keep the result finite
    and close to fp32, in the forward and the backward."""
    torch.manual_seed(3)
    attn = stir(InLineAttention(64, 2), gain=1.0)
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
        plain = reference.attention(attn, x, (64, 64))
    assert out.dtype == dtype
    if dtype == torch.float16:
        assert not torch.isfinite(plain).all()      # the hazard is real
    out.float().backward(g)
    assert torch.isfinite(out).all() and torch.isfinite(xl.grad).all()
    assert rel_err(out, ref) < 3e-2
    assert rel_err(xl.grad, x32.grad) < 5e-2


def test_bad_input_raises():
    for impl in IMPLS:
        attn = InLineAttention(32, 2, impl=impl)
        with pytest.raises(ValueError, match='do not form a 5x5 map'):
            attn(torch.randn(1, 24, 32), (5, 5))
    with pytest.raises(RuntimeError, match='pass the block\'s as projection='):
        InLineAttention(32, 2, proj=False)(torch.randn(1, 25, 32), (5, 5))
    with pytest.raises(ValueError, match='one \\(B, heads, N, d\\) shape'):
        inline_attention(torch.randn(1, 2, 5, 4), torch.randn(1, 2, 6, 4), torch.randn(1, 2, 5, 4))
    with pytest.raises(ValueError, match='kernels must be'):
        local_residual(torch.randn(2, 4, 5, 5), torch.randn(2, 4, 9))
    with pytest.raises(ValueError, match="sizes on the host"):
        inline_kernel(torch.randn(2, 25, 32), torch.randn(96, 32), None, 2, (5, 5), 0.25,
                      valid=ValidMap((5, 5), torch.tensor([[5, 5], [3, 3]])))


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
