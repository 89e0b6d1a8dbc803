"""The paper's switches (``inline_cfg``): linear attention, the kernel phi, the local
residual off, InLine-Swin's windowed InLine blocks; each tested for what it claims.

Han et al., "Bridging the Divide: Reconsidering Softmax and Linear Attention" (NeurIPS
2024, arXiv 2412.06590): linear attention with a kernel is not injective (queries in
one direction, or with ReLU/exp in one ray or one shift, give one output), InLine is.
The references here are written as attention matrices, term by term, not as the
implementation's ``d x d`` statistics.
"""
import math

import pytest
import torch
import torch._dynamo
import torch._dynamo.testing
from conftest import rel_err
from support import (assert_compiled_matches, fx_trace_matching, padded_canvas, quiet_tracer,
                     smoke_backbone, stir)

from benchmarks.reference import local_residual as reference_local_residual
from inline_mm.models import FAMILIES, InLineAttention, InLineSwin, load_pretrained
from inline_mm.models.inline_function import LINEAR_EPS, guard_denominator, plain_qkv
from inline_mm.models.layers import window_merge, window_partition

NAMES = list(FAMILIES)
KERNELS = ['identity', 'relu', 'leakyrelu', 'exp']
TOL = 1e-5


def _stir(module):
    """Random weights and biases strong enough that every term shows."""
    return stir(module, gain=2.0, seed=0)


def build(name, **kw):
    return smoke_backbone(name, seed=0, **kw).eval()


def inline_modules(model):
    return [m for m in model.modules() if isinstance(m, InLineAttention)]


# ------------------------------------------------------------------ the reference
_PHI = {'identity': lambda t: t, 'relu': lambda t: torch.where(t > 0, t, torch.zeros_like(t)),
        'leakyrelu': lambda t: torch.where(t > 0, t, 0.01 * t),
        'exp': lambda t: torch.exp(0.2 * t)}


def ref_global(qkv, heads, scale, attention, kernel):
    """``(B, N, 3C)`` -> ``(B, N, C)`` through the ``N x N`` weights of each head:
    InLine ``w_ij = 1/n + (s/n) (q_i.k_j - mean_l q_i.k_l)``, linear
    ``w_ij = q_i.k_j / sum_l q_i.k_l`` (phi applied to q and k first)."""
    b, n, c3 = qkv.shape
    c = c3 // 3
    q, k, v = qkv.reshape(b, n, 3, heads, c // heads).permute(2, 0, 3, 1, 4)
    sim = _PHI[kernel](q) @ _PHI[kernel](k).transpose(-2, -1)            # (B, heads, N, N)
    if attention == 'inline':
        weights = 1 / n + scale / n * (sim - sim.mean(dim=-1, keepdim=True))
    else:
        weights = sim / sim.sum(dim=-1, keepdim=True)
    return (weights @ v).transpose(1, 2).reshape(b, n, c)


def ref_module(attn, x, hw):
    """What an ``InLineAttention`` with switches computes on ``x`` (no prefix, global):
    the reference global term, the official grouped-convolution local term."""
    b, n, c = x.shape
    qkv = attn.qkv(x)
    out = ref_global(qkv, attn.num_heads, attn.scale, attn.attention, attn.kernel)
    if attn.local_residual:
        v_img = qkv[..., 2 * c:].transpose(1, 2).reshape(b, c, *hw)
        kernels = attn.residual(x.mean(dim=1).unsqueeze(-1)).reshape(b, c, 3, 3)
        out = out + reference_local_residual(v_img, kernels).flatten(2).transpose(1, 2)
    return attn.proj(out)


def _grads(out, seed, *tensors):
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed))
    return torch.autograd.grad(out, tensors, g)


# ------------------------------------------------------------------ injectivity
@pytest.mark.parametrize('kernel, other', [('relu', lambda q: 2 * q), ('exp', lambda q: q + 3.)])
def test_linear_attention_with_a_positive_kernel_is_not_injective_inline_is(kernel, other):
    """ReLU: q and 2q; exp: q and q + 3 (phi(q + c) = e^{0.2c} phi(q)) give linear
    attention one output; InLine tells them apart (formula, then module)."""
    torch.manual_seed(0)
    b, n, c, heads = 2, 6 * 5, 16, 2
    qkv = torch.randn(b, n, 3 * c)
    moved = torch.cat([other(qkv[..., :c]), qkv[..., c:]], dim=-1)
    for attention, same in (('linear', True), ('inline', False)):
        a = plain_qkv(qkv, heads, (6, 5), c ** -0.5, attention=attention, kernel=kernel)
        o = plain_qkv(moved, heads, (6, 5), c ** -0.5, attention=attention, kernel=kernel)
        assert (rel_err(o, a) < TOL) is same, (attention, rel_err(o, a))
    for attention, same in (('linear', True), ('inline', False)):
        attn = _stir(InLineAttention(c, heads, attention=attention, kernel=kernel))
        mean = torch.randn(b, c)
        a, o = attn.attend(qkv, (6, 5), mean), attn.attend(moved, (6, 5), mean)
        assert (rel_err(o, a) < TOL) is same, (attention, rel_err(o, a))


# ------------------------------------------------------------------ against the reference
#: every switched (attention, kernel); ('inline', 'identity') is tests/test_attention.py's
SWITCHED = [(a, k) for a in ('inline', 'linear') for k in KERNELS
            if (a, k) != ('inline', 'identity')]


@pytest.mark.parametrize('attention, kernel', SWITCHED)
def test_every_kernel_matches_the_reference_forward_and_backward(attention, kernel):
    torch.manual_seed(1)
    c, heads, hw = 32, 2, (5, 7)
    # Linear attention with a kernel that can be negative needs a normaliser away from
    # 0 to be compared at all: a common positive part in q and k gives it one.
    attn = _stir(InLineAttention(c, heads, attention=attention, kernel=kernel))
    x = (torch.randn(2, hw[0] * hw[1], c) + 0.5).requires_grad_()
    if attention == 'linear' and kernel in ('identity', 'leakyrelu'):
        with torch.no_grad():
            attn.qkv.bias[:2 * c] += 3.
    params = list(attn.parameters())
    ours, ref = attn(x, hw), ref_module(attn, x, hw)
    assert rel_err(ours, ref) < TOL
    for a, r in zip(_grads(ours, 0, x, *params), _grads(ref, 0, x, *params)):
        assert rel_err(a, r) < TOL


def test_cswin_branch_keeps_lepe_without_the_local_residual():
    """CSwin's LePE is its positional term, not InLine's local residual."""
    c, hw = 16, (6, 4)
    attn = _stir(InLineAttention(c, 2, proj=False, lepe=True, local_residual=False,
                                 kernel='relu'))
    qkv = torch.randn(2, 24, 3 * c, requires_grad=True)
    v_img = qkv[..., 2 * c:].transpose(1, 2).reshape(2, c, *hw)
    ref = ref_global(qkv, 2, attn.scale, 'inline', 'relu') \
        + attn.lepe(v_img).flatten(2).transpose(1, 2)
    ours = attn.attend(qkv, hw)                        # no token mean needed
    assert rel_err(ours, ref) < TOL
    assert rel_err(_grads(ours, 0, qkv)[0], _grads(ref, 0, qkv)[0]) < TOL
    model = build('InLineCSwin', inline_cfg=dict(local_residual=False))
    branches = inline_modules(model)
    assert branches and all(m.residual is None and m.lepe is not None for m in branches)


# ------------------------------------------------------------------ the normaliser guard
def test_guard_keeps_the_sign_and_floors_the_magnitude():
    den = torch.tensor([-2., -1e-8, 0., 1e-8, 3.])
    assert torch.equal(guard_denominator(den),
                       torch.tensor([-2., -LINEAR_EPS, LINEAR_EPS, LINEAR_EPS, 3.]))


def test_identity_linear_attention_stays_finite_where_the_normaliser_is_zero():
    torch.manual_seed(0)
    c, hw = 8, (3, 4)
    attn = _stir(InLineAttention(c, 1, attention='linear', local_residual=False))
    qkv = torch.randn(1, 12, 3 * c)
    qkv[0, :5, :c] = 0                                  # phi(q_i) . z == 0 exactly
    z = qkv[0, :, c:2 * c].mean(0)
    u = torch.randn(c)
    qkv[0, 5, :c] = u - (u @ z) / (z @ z) * z           # orthogonal to z: |den| ~ rounding
    qkv.requires_grad_()
    out = attn.attend(qkv, hw)
    assert torch.isfinite(out).all() and not out[0, :5].any()
    out.sum().backward()
    assert torch.isfinite(qkv.grad).all()
    # All keys zero: z == 0 for every query; the guard answers 0, not NaN.
    keys_zero = qkv.detach().clone()
    keys_zero[..., c:2 * c] = 0
    assert not attn.attend(keys_zero, hw).any()


# ------------------------------------------------------------------ local residual off
@pytest.mark.parametrize('attention', ['inline', 'linear'])
def test_local_residual_off_has_no_parameters_and_only_the_global_term(attention):
    c, hw = 16, (4, 6)
    attn = _stir(InLineAttention(c, 2, attention=attention, kernel='relu',
                                 local_residual=False))
    assert attn.residual is None and not [k for k in attn.state_dict() if 'residual' in k]
    x = torch.randn(2, 24, c)
    ref = attn.proj(ref_global(attn.qkv(x), 2, attn.scale, attention, 'relu'))
    assert rel_err(attn(x, hw), ref) < TOL
    for name in NAMES:
        model = build(name, inline_cfg=dict(local_residual=False))
        assert not [k for k in model.state_dict() if '.residual.' in k], name


# ------------------------------------------------------------------ windows
@pytest.mark.parametrize('attention, kernel', [('inline', 'identity'), ('linear', 'exp')])
def test_windows_equal_the_module_on_each_window(attention, kernel):
    """A map that is a multiple of the window: the windowed module is the global one
    run on every window as a map of its own (statistics, kernels, local term)."""
    c, ws, (h, w) = 16, 4, (8, 12)
    win = _stir(InLineAttention(c, 2, attention=attention, kernel=kernel, window_size=ws))
    glob = InLineAttention(c, 2, attention=attention, kernel=kernel)
    glob.load_state_dict(win.state_dict())
    x = torch.randn(2, h * w, c, requires_grad=True)
    parts = window_partition(x.view(2, h, w, c), ws, ws)
    ref = window_merge(glob(parts, (ws, ws)), ws, ws, h, w, 2).reshape(2, h * w, c)
    ours = win(x, (h, w))
    assert rel_err(ours, ref) < TOL
    assert rel_err(_grads(ours, 0, x)[0], _grads(ref, 0, x)[0]) < TOL


def test_partial_windows_equal_the_module_on_their_part_of_the_map():
    """A map that is not a multiple: a border window is its part inside the map alone
    (the padding enters no statistic, the local term sees zeros past it); a side within
    one window is one window of it."""
    c, ws, (h, w) = 8, 4, (7, 10)
    win = _stir(InLineAttention(c, 1, attention='linear', kernel='relu', window_size=ws))
    glob = InLineAttention(c, 1, attention='linear', kernel='relu')
    glob.load_state_dict(win.state_dict())
    x = torch.randn(1, h * w, c)
    ours = win(x, (h, w)).view(1, h, w, c)
    img = x.view(1, h, w, c)
    for r in range(0, h, ws):
        for s in range(0, w, ws):
            part = img[:, r:r + ws, s:s + ws]
            hw = part.shape[1:3]
            ref = glob(part.reshape(1, -1, c), hw).view(1, *hw, c)
            assert rel_err(ours[:, r:r + ws, s:s + ws], ref) < TOL, (r, s)
    small = _stir(InLineAttention(c, 1, window_size=16))
    big = InLineAttention(c, 1)
    big.load_state_dict(small.state_dict())
    assert rel_err(small(x, (h, w)), big(x, (h, w))) < TOL


def test_window_covering_the_map_is_the_global_model():
    x = torch.randn(1, 3, 64, 96)
    glob = build('InLineSwin', inline_cfg=dict(kernel='relu'))
    win = build('InLineSwin', inline_cfg=dict(kernel='relu', window_size=64))
    win.load_state_dict(glob.state_dict())
    with torch.no_grad():
        for a, b in zip(win(x), glob(x)):
            assert rel_err(a, b) < TOL
        small = build('InLineSwin', inline_cfg=dict(kernel='relu', window_size=4))
        small.load_state_dict(glob.state_dict())
        assert rel_err(small(x)[0], glob(x)[0]) > 1e-3       # (windows that do cut)


# ------------------------------------------------------------------ configuration
def test_per_stage_configuration_shows_in_the_built_modules():
    # smoke stage types: inline, softmax, (inline, softmax), softmax
    model = build('InLineSwin', inline_cfg=[dict(attention='linear'), None,
                                            dict(kernel='exp', window_size=2), {}])
    first = model.layers[0].blocks[0].attn
    third = model.layers[2].blocks[0].attn
    assert (first.attention, first.kernel, first.window_size) == ('linear', 'identity', None)
    assert (third.attention, third.kernel, third.window_size) == ('inline', 'exp', 2)
    assert "attention='linear'" in repr(first) and 'kernel' not in first.extra_repr()
    assert "kernel='exp', window_size=2" in third.extra_repr()
    assert model.inline_options == [dict(attention='linear'), {},
                                    dict(kernel='exp', window_size=2), {}]
    plain = build('InLineSwin')
    assert all(m.extra_repr() == f"dim={m.dim}, num_heads={m.num_heads}, impl='auto'"
               for m in inline_modules(plain))
    deit = build('InLineDeiT', inline_cfg=[None] * 11 + [dict(local_residual=False)])
    assert [b.attn.local_residual for b in deit.blocks] == [True] * 11 + [False]


BAD = [
    ('InLineSwin', dict(attn='linear'), 'unknown key.*allowed: attention, kernel, '
                                        'local_residual, window_size'),
    ('InLineSwin', dict(attention='softmax'), "allowed: 'inline', 'linear'"),
    ('InLinePVT', dict(kernel='gelu'), "allowed: 'identity', 'relu', 'leakyrelu', 'exp'"),
    ('InLineCSwin', dict(local_residual='no'), 'allowed: True, False'),
    ('InLineSwin', dict(window_size=0), 'allowed: None .* int >= 1'),
    ('InLineSwin', dict(window_size=7.0), 'allowed: None .* int >= 1'),
    ('InLinePVT', dict(window_size=7), 'InLine-Swin ablation.*allowed: None'),
    ('InLineCSwin', [None, dict(window_size=7), None, None], 'InLine-Swin ablation'),
    ('InLineDeiT', dict(window_size=7), 'InLine-Swin ablation'),
    ('InLineSwin', [dict(kernel='relu')] * 3, '3 entries but there are 4 stages'),
    ('InLineSwin', [None, dict(kernel='relu'), None, None],
     r'inline_cfg\[1\].*stage 1 has no InLine block'),
    ('InLineSwin', 'linear', 'must be a dict, a sequence'),
    ('InLineSwin', [None, None, 'relu', None], r'inline_cfg\[2\] must be a dict'),
]


@pytest.mark.parametrize('name, cfg, message', BAD)
def test_bad_switches_are_refused_naming_what_is_allowed(name, cfg, message):
    with pytest.raises(ValueError, match=message):
        build(name, inline_cfg=cfg)


def test_a_dict_for_a_model_without_inline_blocks_is_refused():
    with pytest.raises(ValueError, match='no stage has an InLine block'):
        build('InLineSwin', stage_types=['softmax'] * 4, inline_cfg=dict(kernel='relu'))
    build('InLineSwin', stage_types=['softmax'] * 4, inline_cfg={})         # nothing set


# ------------------------------------------------------------------ padding awareness
SWITCHES = [dict(attention='linear', kernel='relu'), dict(attention='linear', kernel='leakyrelu'),
            dict(kernel='exp'), dict(kernel='relu', local_residual=False)]
CASES = [(name, cfg) for name in NAMES for cfg in SWITCHES] + \
    [('InLineSwin', dict(window_size=3)), ('InLineSwin', dict(attention='linear', window_size=5))]


def _alone_and_in_a_padded_batch(model, name, tol, dtype=torch.float32):
    torch.manual_seed(2)
    a, b = torch.randn(3, 72, 104, dtype=dtype), torch.randn(3, 150, 180, dtype=dtype)
    x = padded_canvas([b, a], (160, 192)).requires_grad_()
    alone = a[None].clone().requires_grad_()
    outs, outs_a = model(x), model(alone)
    family = FAMILIES[name]
    loss = loss_a = 0
    for i, (o, r) in enumerate(zip(outs, outs_a)):
        s = family.stride(i)
        part = o[1, :, :math.ceil(72 / s), :math.ceil(104 / s)]
        assert torch.isfinite(o).all() and rel_err(part, r[0]) < tol, (i, rel_err(part, r[0]))
        weight = torch.randn(r.shape[1:], generator=torch.Generator().manual_seed(i))
        loss, loss_a = loss + (part * weight.to(dtype)).sum(), loss_a + (r[0] * weight).sum()
    loss.backward()
    loss_a.backward()
    assert rel_err(x.grad[1, :, :72, :104], alone.grad[0]) < tol
    assert not x.grad[0].any()


@pytest.mark.parametrize('name, cfg', CASES)
def test_padded_batch_gives_each_image_its_features_alone(name, cfg):
    _alone_and_in_a_padded_batch(build(name, inline_cfg=cfg), name, TOL)


@pytest.mark.parametrize('name', NAMES)
def test_padded_batch_identity_linear_attention_in_float64(name):
    """Identity-kernel linear attention divides by normalisers of both signs, some near
    0, which magnify fp32 rounding through the blocks beyond any fixed tolerance (its
    instability is the paper's point): its padding awareness is checked in fp64."""
    model = build(name, inline_cfg=dict(attention='linear', local_residual=False)).double()
    _alone_and_in_a_padded_batch(model, name, 1e-6, torch.float64)


# ------------------------------------------------------------------ tracers
TRACED = [('InLineSwin', dict(attention='linear', kernel='relu', window_size=5)),
          ('InLinePVT', dict(kernel='exp')),
          ('InLineCSwin', dict(attention='linear', local_residual=False)),
          ('InLineDeiT', dict(attention='linear', kernel='leakyrelu'))]


@pytest.mark.parametrize('name, cfg', TRACED)
def test_jit_trace_at_one_size_matches_eager(name, cfg):
    model = build(name, inline_cfg=cfg)
    x = torch.randn(1, 3, 64, 96)
    with torch.no_grad(), quiet_tracer():
        graph = torch.jit.trace(model, x, check_trace=False)
        batch = torch.randn(2, 3, 64, 96)
        # The local term is a grouped convolution in eager mode and shifted adds in the
        # graph: the same sums in another order (the numerical contract's measure).
        for got, ref in zip(graph(batch), model(batch)):
            assert rel_err(got, ref) <= 1e-5


def test_onnx_export_of_windowed_linear_swin_matches_eager(tmp_path):
    ort = pytest.importorskip('onnxruntime')
    from inline_mm.deploy.backbone import export_onnx, run_onnx
    model = build('InLineSwin', inline_cfg=dict(attention='linear', kernel='relu',
                                                window_size=5))
    path = str(tmp_path / 'switched.onnx')
    with quiet_tracer():
        export_onnx(model, path, (64, 96))
    assert ort is not None
    x = torch.randn(1, 3, 64, 96)
    with torch.no_grad():
        ref = model(x)
    for got, r in zip(run_onnx(path, x, threads=1), ref):
        torch.testing.assert_close(got, r, rtol=0, atol=1e-4)


def test_torch_compile_one_graph_matches_eager():
    torch._dynamo.reset()
    model = build(*TRACED[0][:1], inline_cfg=TRACED[0][1])
    counts = torch._dynamo.testing.CompileCounterWithBackend('eager')
    compiled = torch.compile(model, backend=counts, fullgraph=True)
    for size in [(64, 96), (72, 80)]:
        assert_compiled_matches(compiled, model, torch.randn(2, 3, *size))
    assert counts.frame_count <= 2


@pytest.mark.parametrize('name, cfg', TRACED)
def test_fx_symbolic_trace_matches_eager(name, cfg):
    fx_trace_matching(build(name, inline_cfg=cfg))


def test_timm_create_model_passes_inline_cfg_through():
    timm = pytest.importorskip('timm')
    import inline_mm.timm  # noqa: F401  (registers the names)
    smoke = {k: v for k, v in FAMILIES['InLineSwin'].smoke.items()}
    cfg = [dict(attention='linear', kernel='relu'), None, dict(window_size=3), None]
    features = timm.create_model('inline_swin_tiny', features_only=True, inline_cfg=cfg,
                                 **smoke)
    classifier = timm.create_model('inline_swin_tiny', inline_cfg=cfg, num_classes=5, **smoke)
    for model in (features, classifier):
        attns = inline_modules(model)
        assert [(m.attention, m.kernel, m.window_size) for m in attns] == \
            [('linear', 'relu', None), ('inline', 'identity', 3)]
    with torch.no_grad():
        assert classifier(torch.randn(1, 3, 64, 64)).shape == (1, 5)
        assert len(features(torch.randn(1, 3, 64, 64))) == 4


# ------------------------------------------------------------------ weights
def _official_file(tmp_path, name):
    """A tiny checkpoint of the released (default) model in the official layout
    (``{'model': state_dict}``; the converter takes converted keys as they are)."""
    model = build(name)
    model.init_weights()
    path = tmp_path / f'{name}.pth'
    torch.save({'model': model.state_dict(), 'epoch': 300}, path)
    return str(path), model


@pytest.mark.parametrize('name', NAMES)
def test_inline_weights_load_into_switched_models(name, tmp_path):
    path, released = _official_file(tmp_path, name)
    for cfg in (dict(attention='linear'), dict(kernel='exp')):
        model = build(name, inline_cfg=cfg)
        report = load_pretrained(model, path)
        assert not report['missing'] and not report['unexpected'], cfg
        for k, v in model.state_dict().items():
            assert torch.equal(v, released.state_dict()[k]), k
    model = build(name, inline_cfg=dict(local_residual=False))
    report = load_pretrained(model, path)
    residual = [k for k in released.state_dict() if '.residual.' in k]
    assert residual and sorted(report['unexpected']) == sorted(residual)
    assert not report['missing']
    for k, v in model.state_dict().items():
        assert torch.equal(v, released.state_dict()[k]), k


def test_checkpoint_without_the_local_term_names_the_switch(tmp_path):
    model = build('InLineDeiT', inline_cfg=dict(local_residual=False))
    path = tmp_path / 'no_residual.pth'
    torch.save({'model': model.state_dict()}, path)
    with pytest.raises(Exception, match='local_residual=False'):
        load_pretrained(build('InLineDeiT'), str(path))
    report = load_pretrained(build('InLineDeiT', inline_cfg=dict(local_residual=False)),
                             str(path))
    assert not report['missing'] and not report['unexpected']


def test_switched_swin_is_still_an_inline_swin_for_the_variant_check(tmp_path):
    """The variant check (depths) is unchanged by switches."""
    path, _ = _official_file(tmp_path, 'InLineSwin')
    deeper = build('InLineSwin', depths=(1, 2, 3, 2),
                   stage_types=('inline', 'softmax', 'inline', 'softmax'),
                   inline_cfg=dict(attention='linear'))
    with pytest.raises(Exception, match='another variant'):
        load_pretrained(deeper, path)
    assert isinstance(deeper, InLineSwin)
