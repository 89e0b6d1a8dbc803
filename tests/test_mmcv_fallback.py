"""inline_mm's torchvision stand-in for mmcv's compiled ``_ext`` (mmcv-lite path).

Equality with compiled mmcv is checked against outputs recorded once from compiled mmcv 2.1.0
(``tools/dev/make_mmcv_references.py`` -> ``tests/data/mmcv_ops_reference.pth``), and live when
a compiled mmcv is importable.  The fallback is forced in both cases by pointing mmcv's op
wrappers at it, so the wrappers' own Python (score threshold, class offsets, splitting, the
preallocated outputs) runs exactly as users run it.
"""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import _inline_mm_mmcv_hook
from support import load_script
from mmcv.ops import batched_nms, nms, roi_align

# the op modules (``mmcv.ops.nms`` as an attribute is the function of that name)
mmcv_nms = sys.modules['mmcv.ops.nms']
mmcv_roi_align = sys.modules['mmcv.ops.roi_align']

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = Path(__file__).parent / 'data' / 'mmcv_ops_reference.pth'


FALLBACK = load_script('inline_mm/patches/mmcv_ext.py', 'inline_mm_fallback_under_test')


@pytest.fixture
def use_fallback(monkeypatch):
    monkeypatch.setattr(mmcv_nms, 'ext_module', FALLBACK)
    monkeypatch.setattr(mmcv_roi_align, 'ext_module', FALLBACK)


@pytest.fixture(scope='module')
def reference():
    return torch.load(REFERENCE, weights_only=True)


#: the recorded case of RoIAlign run as the reference tool ran it (output, input gradient)
run_roi_align = load_script('tools/dev/make_mmcv_references.py').run_roi_align


def assert_same_keep(ours, ref, scores):
    """Identical kept sets; the order may differ only among exactly equal scores."""
    assert sorted(ours.tolist()) == sorted(ref.tolist())
    assert torch.equal(scores[ours], scores[ref])


def test_reference_was_recorded_from_compiled_mmcv(reference):
    assert reference['mmcv_version'].startswith('2.1')
    assert len(reference['nms']) >= 5 and len(reference['roi_align']) >= 9


def test_nms_equals_compiled_mmcv(reference, use_fallback):
    for case in reference['nms']:
        _, keep = nms(case['boxes'], case['scores'], case['iou'])
        assert keep.dtype == torch.long, case['name']
        assert_same_keep(keep, case['keep'], case['scores'])


def test_batched_nms_with_class_offsets_equals_compiled_mmcv(reference, use_fallback):
    for case in reference['batched_nms']:
        _, keep = batched_nms(case['boxes'], case['scores'], case['idxs'], dict(case['nms_cfg']))
        assert_same_keep(keep, case['keep'], case['scores'])


def test_roi_align_forward_backward_equal_compiled_mmcv(reference, use_fallback):
    for case in reference['roi_align']:
        out, grad = run_roi_align(case)
        assert out.shape == case['output'].shape, case['name']
        torch.testing.assert_close(out, case['output'], rtol=0, atol=1e-5, msg=case['name'])
        torch.testing.assert_close(grad, case['grad_input'], rtol=0, atol=1e-5,
                                   msg=case['name'])


@pytest.mark.skipif(_inline_mm_mmcv_hook.backend() != 'compiled',
                    reason='no compiled mmcv in this environment (recorded references used)')
def test_live_against_compiled_mmcv(monkeypatch):
    gen = torch.Generator().manual_seed(1)
    xy = torch.rand(500, 2, generator=gen) * 100
    boxes = torch.cat([xy, xy + torch.rand(500, 2, generator=gen) * 30 + 1], 1)
    scores = torch.rand(500, generator=gen)
    feats = torch.randn(2, 4, 16, 16, generator=gen)
    rois = torch.tensor([[0, -4., 2., 40., 30.], [1, 10., 10., 70., 70.]])
    case = dict(feats=feats, rois=rois, output_size=(7, 7), spatial_scale=0.25,
                sampling_ratio=0, aligned=True, grad_output=torch.randn(2, 4, 7, 7))
    ref_keep, ref_roi = nms(boxes, scores, 0.5)[1], run_roi_align(case)
    monkeypatch.setattr(mmcv_nms, 'ext_module', FALLBACK)
    monkeypatch.setattr(mmcv_roi_align, 'ext_module', FALLBACK)
    assert_same_keep(nms(boxes, scores, 0.5)[1], ref_keep, scores)
    for ours, ref in zip(run_roi_align(case), ref_roi):
        torch.testing.assert_close(ours, ref, rtol=0, atol=1e-5)


def test_options_torchvision_lacks_raise_clearly(use_fallback):
    boxes = torch.tensor([[0., 0., 4., 4.]])
    with pytest.raises(FALLBACK.MissingCompiledOpError, match='offset=1'):
        nms(boxes, torch.ones(1), 0.5, offset=1)
    with pytest.raises(FALLBACK.MissingCompiledOpError, match="pool_mode='max'.*INLINE_MM_MMCV"):
        roi_align(torch.rand(1, 1, 8, 8), torch.tensor([[0., 0., 0., 4., 4.]]), (2, 2), 1.0, 0,
                  'max', True)


def test_other_compiled_ops_exist_but_raise_naming_the_op():
    op = FALLBACK.deform_conv_forward
    assert op.__name__ == 'deform_conv_forward'
    with pytest.raises(NotImplementedError, match='`deform_conv_forward`.*INLINE_MM_MMCV=full'):
        op(torch.zeros(1))
    with pytest.raises(AttributeError):
        FALLBACK.__path__  # dunder names stay absent: importlib must not see a package


def run_python(code, **env):
    e = dict(os.environ, **env)
    e.pop('INLINE_MM_RECORD_OPS', None)
    return subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, env=e,
                          cwd=ROOT, timeout=300)


@pytest.mark.subprocess
@pytest.mark.skipif(_inline_mm_mmcv_hook.backend() != 'fallback',
                    reason='a compiled mmcv answers mmcv._ext here')
def test_hook_wires_stock_entry_points_before_inline_mm_is_imported():
    # The ways users start work that import mmcv.ops before any config is read.
    code = ('import sys\n'
            'from mmdet.apis import DetInferencer, init_detector\n'
            'import mmseg.utils\n'
            'from mmseg.apis import MMSegInferencer\n'
            'import mmcv.ops, _inline_mm_mmcv_hook\n'
            "assert 'inline_mm' not in sys.modules\n"
            "names = [getattr(f, '__name__', type(f).__name__) for f in sys.meta_path]\n"
            "assert names.index('MmcvExtFallbackFinder') > names.index('PathFinder'), names\n"
            "print(_inline_mm_mmcv_hook.backend(), 'torchvision.ops' in sys.modules)\n")
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the last line: onedl-mmdetection logs 'Could not import OneDL ...' to stdout first
    assert proc.stdout.splitlines()[-1].split()[0] == 'fallback', proc.stdout


@pytest.mark.subprocess
@pytest.mark.skipif(_inline_mm_mmcv_hook.backend() != 'fallback',
                    reason='a compiled mmcv answers mmcv._ext here')
def test_hook_can_be_switched_off_and_answers_nothing_without_inline_mm(monkeypatch):
    proc = run_python('import mmcv.ops', INLINE_MM_MMCV_FALLBACK='0')
    assert proc.returncode != 0 and "No module named 'mmcv._ext'" in proc.stderr
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, 'find_spec',
                        lambda name, *a: None if name == 'inline_mm' else find_spec(name, *a))
    assert _inline_mm_mmcv_hook.fallback_path() is None
    assert _inline_mm_mmcv_hook.MmcvExtFallbackFinder().find_spec('mmcv._ext') is None
    assert _inline_mm_mmcv_hook.MmcvExtFallbackFinder().find_spec('mmcv.ops') is None


@pytest.mark.subprocess
def test_pth_line_is_inert_when_the_hook_module_is_gone(tmp_path):
    line = _inline_mm_mmcv_hook.PTH_LINE
    code = ('import sys\n'
            "sys.modules['_inline_mm_mmcv_hook'] = None\n"  # as if uninstalled
            "import importlib.util\n"
            "orig = importlib.util.find_spec\n"
            "importlib.util.find_spec = lambda n, *a: None if n == '_inline_mm_mmcv_hook' "
            "else orig(n, *a)\n"
            f'exec({line!r})\n'
            'print("inert")\n')
    proc = run_python(code)
    assert proc.returncode == 0 and 'inert' in proc.stdout, proc.stderr


def test_hook_command_installs_and_removes_its_pth(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(_inline_mm_mmcv_hook, 'pth_path', lambda site=None: str(tmp_path / 'x.pth'))
    assert _inline_mm_mmcv_hook.main(['install']) == 0
    assert (tmp_path / 'x.pth').read_text() == _inline_mm_mmcv_hook.PTH_LINE
    assert _inline_mm_mmcv_hook.main(['uninstall']) == 0
    assert not (tmp_path / 'x.pth').exists()
    assert _inline_mm_mmcv_hook.main(['status']) == 0 and 'absent' in capsys.readouterr().out
    with pytest.raises(SystemExit) as refused:
        _inline_mm_mmcv_hook.main(['bogus'])
    assert refused.value.code == 2 and 'invalid choice' in capsys.readouterr().err


CONFIG_UTILS_PROBE = ('import sys\n'
                      'import mmengine.config.utils as u\n'
                      "assert 'inline_mm' not in sys.modules\n"
                      "print(u.MODULE2PACKAGE.get('inline_mm'), type(u.__loader__).__name__)\n")


@pytest.mark.subprocess
def test_hook_adds_inline_mm_to_mmengines_config_packages_and_can_be_switched_off():
    """The start-up hook (the .pth the set-up and the wheel put in place) names inline_mm in
    mmengine's table of ``pkg::`` packages as that module loads, leaving its loader as it was;
    INLINE_MM_CONFIG_BASES=0 leaves the table alone.  (That a base then resolves to the
    wheel's .mim/configs: tests/test_wheel.py.)"""
    on = run_python(CONFIG_UTILS_PROBE)
    assert on.returncode == 0, on.stderr[-3000:]
    assert on.stdout.split() == ['inline_mm', 'SourceFileLoader']
    off = run_python(CONFIG_UTILS_PROBE, INLINE_MM_CONFIG_BASES='0')
    assert off.returncode == 0, off.stderr[-3000:]
    assert off.stdout.split() == ['None', 'SourceFileLoader']


def test_config_scope_finder_answers_for_one_module_only(monkeypatch):
    import mmengine.config
    finder = _inline_mm_mmcv_hook.ConfigScopeFinder()
    assert finder.find_spec('mmengine.config.config', mmengine.config.__path__) is None
    assert finder.find_spec('mmcv._ext') is None
    spec = finder.find_spec(_inline_mm_mmcv_hook.CONFIG_UTILS, mmengine.config.__path__)
    assert isinstance(spec.loader, _inline_mm_mmcv_hook._AfterExec)
    assert spec.origin == mmengine.config.utils.__file__
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, 'find_spec',
                        lambda name, *a: None if name == 'inline_mm' else find_spec(name, *a))
    assert finder.find_spec(_inline_mm_mmcv_hook.CONFIG_UTILS,
                            mmengine.config.__path__) is None          # inline_mm gone


def test_scope_table_repointed_only_where_mmengines_lookup_fails(monkeypatch):
    """The ``mmseg::`` fix of the hook: an entry naming a distribution that is neither
    installed nor importable, for a scope that is importable, becomes the import name; every
    other entry stays (onedl-mmsegmentation provides ``mmseg`` without ``mmsegmentation``)."""
    monkeypatch.setattr(_inline_mm_mmcv_hook, 'REPOINTED_SCOPES', {})
    table = {'mmseg': 'no-such-distribution-here', 'mmdet': 'mmdet',
             'no_such_scope_here': 'no-such-distribution-either', 'torch': 'numpy',
             'inline_mm': 'inline_mm'}
    _inline_mm_mmcv_hook._repoint_scopes(table)
    assert table == {'mmseg': 'mmseg', 'mmdet': 'mmdet',
                     'no_such_scope_here': 'no-such-distribution-either', 'torch': 'numpy',
                     'inline_mm': 'inline_mm'}
    assert _inline_mm_mmcv_hook.REPOINTED_SCOPES == {'mmseg': 'no-such-distribution-here'}
    # the real table: re-pointed exactly when mmengine's own look-up cannot find mmseg
    import importlib.metadata as md

    from mmengine.config.utils import MODULE2PACKAGE
    try:
        md.distribution('mmsegmentation')
        upstream = True
    except md.PackageNotFoundError:
        upstream = False
    assert MODULE2PACKAGE['mmseg'] == ('mmsegmentation' if upstream else 'mmseg')


# ------------------------------------------------ the ops mmcv calls only on CUDA tensors
# mmdet's FocalLoss and mmcv's MultiScaleDeformableAttention take their pure-PyTorch paths on
# CPU and call mmcv._ext on CUDA tensors only. Here each of those CUDA-branch calls is made
# on CPU tensors, with mmcv's op module pointed at the stand-in, against the references.
mmcv_focal = sys.modules['mmcv.ops.focal_loss']
mmcv_msda = sys.modules['mmcv.ops.multi_scale_deform_attn']


@pytest.fixture
def cuda_branch_ops(monkeypatch):
    monkeypatch.setattr(mmcv_focal, 'ext_module', FALLBACK)
    monkeypatch.setattr(mmcv_msda, 'ext_module', FALLBACK)


def test_served_functions_are_defined_and_named_in_the_table():
    for name in FALLBACK.SERVED:
        assert getattr(FALLBACK, name).__name__ == name
        assert f'``{name}``' in FALLBACK.__doc__, name


@pytest.mark.parametrize('dtype,tol', [(torch.float32, 1e-5), (torch.float64, 1e-12)])
def test_sigmoid_focal_loss_as_mmdets_cuda_branch_equals_py_sigmoid_focal_loss(
        cuda_branch_ops, dtype, tol):
    import torch.nn.functional as F
    from mmdet.models.losses.focal_loss import py_sigmoid_focal_loss, sigmoid_focal_loss
    gen = torch.Generator().manual_seed(0)
    n, c = 300, 11
    logits = (torch.randn(n, c, generator=gen) * 5).to(dtype)
    logits[0, :4] = torch.tensor([-30., 30., -80., 80.])        # saturated probabilities
    labels = torch.randint(0, c + 1, (n,), generator=gen)       # c: background
    weight = torch.rand(n, generator=gen).to(dtype)
    for reduction, avg_factor, w in (('mean', None, None), ('sum', None, weight),
                                     ('mean', 37.5, weight), ('none', None, weight)):
        ours_in = logits.clone().requires_grad_()
        ref_in = logits.clone().requires_grad_()
        # FocalLoss.forward on CUDA: mmdet's sigmoid_focal_loss on (N,) class indices
        ours = sigmoid_focal_loss(ours_in, labels, w, 2.0, 0.25, reduction, avg_factor)
        # ... and on CPU: py_sigmoid_focal_loss on one-hot targets
        ref = py_sigmoid_focal_loss(ref_in, F.one_hot(labels, c + 1)[:, :c], w, 2.0, 0.25,
                                    reduction, avg_factor)
        torch.testing.assert_close(ours, ref, rtol=tol, atol=tol)
        grad = torch.rand_like(ref)
        ours.backward(grad)
        ref.backward(grad)
        torch.testing.assert_close(ours_in.grad, ref_in.grad, rtol=tol, atol=tol)


def test_sigmoid_focal_loss_gradcheck_and_class_weights(cuda_branch_ops):
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(12, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    labels = torch.tensor([0, 1, 2, 3, 4] * 2 + [1, 4])             # 4: background
    for gamma, alpha in ((2.0, 0.25), (1.5, 0.5), (0.0, 0.75)):
        assert torch.autograd.gradcheck(
            lambda x: mmcv_focal.sigmoid_focal_loss(x, labels, gamma, alpha, None, 'sum'),
            (logits,))
    # mmcv's class weights (the kernel's weight[target]) scale a row by its class's weight
    fg = labels.clamp(max=3)
    cls_w = torch.rand(4, generator=gen, dtype=torch.float64)
    plain = mmcv_focal.sigmoid_focal_loss(logits, fg, 2.0, 0.25, None, 'none')
    weighted = mmcv_focal.sigmoid_focal_loss(logits, fg, 2.0, 0.25, cls_w, 'none')
    torch.testing.assert_close(weighted, plain * cls_w[fg][:, None])
    assert torch.autograd.gradcheck(
        lambda x: mmcv_focal.sigmoid_focal_loss(x, fg, 2.0, 0.25, cls_w, 'mean'), (logits,))
    # a background row has no class weight: the kernel would read past it
    with pytest.raises(ValueError, match='background target'):
        mmcv_focal.sigmoid_focal_loss(logits, labels.clamp(min=4), 2.0, 0.25, cls_w, 'none')


def _deform_attn_case(dtype, gen, batch=2, heads=4, dims=8, queries=30, points=4,
                      shapes=((12, 17), (6, 9), (3, 5), (2, 3))):
    shapes = torch.tensor(shapes)
    starts = torch.cat([shapes.new_zeros(1), shapes.prod(1).cumsum(0)[:-1]])
    levels = len(shapes)
    value = torch.randn(batch, int(shapes.prod(1).sum()), heads, dims, generator=gen)
    # locations beyond the map on every side too (zero padding there)
    locs = torch.rand(batch, queries, heads, levels, points, 2, generator=gen) * 1.4 - 0.2
    weights = torch.rand(batch, queries, heads, levels * points, generator=gen).softmax(-1)
    weights = weights.view(batch, queries, heads, levels, points)
    return shapes, starts, value.to(dtype), locs.to(dtype), weights.to(dtype)


@pytest.mark.parametrize('dtype,tol', [(torch.float32, 1e-5), (torch.float64, 1e-12)])
def test_ms_deform_attn_as_mmcvs_cuda_branch_equals_the_pytorch_reference(
        cuda_branch_ops, dtype, tol):
    from mmcv.ops.multi_scale_deform_attn import (MultiScaleDeformableAttnFunction,
                                                  multi_scale_deformable_attn_pytorch)
    shapes, starts, *inputs = _deform_attn_case(dtype, torch.Generator().manual_seed(0))
    ours_in = [t.clone().requires_grad_() for t in inputs]
    ref_in = [t.clone().requires_grad_() for t in inputs]
    # MultiScaleDeformableAttention.forward on CUDA (im2col_step 64, its default) ...
    ours = MultiScaleDeformableAttnFunction.apply(ours_in[0], shapes, starts, *ours_in[1:], 64)
    # ... and on CPU
    ref = multi_scale_deformable_attn_pytorch(ref_in[0], shapes, *ref_in[1:])
    assert ours.shape == ref.shape == (2, 30, 32)
    torch.testing.assert_close(ours, ref, rtol=tol, atol=tol)
    grad = torch.randn_like(ref)
    ours.backward(grad)
    ref.backward(grad)
    for a, b in zip(ours_in, ref_in):
        torch.testing.assert_close(a.grad, b.grad, rtol=tol, atol=tol)


def test_ms_deform_attn_gradcheck(cuda_branch_ops):
    from mmcv.ops.multi_scale_deform_attn import MultiScaleDeformableAttnFunction
    shapes, starts, *inputs = _deform_attn_case(
        torch.float64, torch.Generator().manual_seed(2), batch=1, heads=2, dims=3, queries=5,
        points=2, shapes=((4, 5), (2, 3)))
    inputs = [t.requires_grad_() for t in inputs]
    assert torch.autograd.gradcheck(
        lambda v, loc, w: MultiScaleDeformableAttnFunction.apply(v, shapes, starts, loc, w, 64),
        inputs)



# ------------------------------------------------ every op in the dtypes autocast hands it
DEVICES = ['cpu', pytest.param('cuda', marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason='no CUDA device'))]
LOW = [torch.float16, torch.bfloat16]


def _low_precision_op(op: str, dtype, device, gen):
    """``(run, inputs)`` of one op through mmcv's Python: ``run(*inputs)`` returns the output
    whose gradient is taken; the inputs drawn in fp32 and rounded to ``dtype`` (the fp32
    reference runs on the rounded values)."""
    from mmcv.ops.multi_scale_deform_attn import MultiScaleDeformableAttnFunction
    if op == 'roi_align':
        feats = torch.randn(2, 4, 24, 24, generator=gen)
        rois = torch.tensor([[0, 1.25, 2.5, 17.75, 13.5], [1, -3., 4., 30., 22.5],
                             [1, 5., 5., 5.5, 6.]])
        return (lambda x: roi_align(x, rois.to(device), (7, 7), 0.75, 2, 'avg', True)), [feats]
    if op == 'sigmoid_focal_loss':
        logits = torch.randn(40, 6, generator=gen) * 4
        labels = torch.randint(0, 7, (40,), generator=gen).to(device)     # 6: background
        return (lambda x: mmcv_focal.sigmoid_focal_loss(x, labels, 2.0, 0.25, None, 'none'),
                [logits])
    shapes, starts, *inputs = _deform_attn_case(torch.float32, gen)
    shapes, starts = shapes.to(device), starts.to(device)
    return (lambda v, loc, w: MultiScaleDeformableAttnFunction.apply(v, shapes, starts, loc,
                                                                     w, 64)), inputs


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('dtype', LOW, ids=['fp16', 'bf16'])
@pytest.mark.parametrize('op', ['roi_align', 'sigmoid_focal_loss', 'ms_deform_attn'])
def test_low_precision_forward_and_backward_in_fp32_return_the_input_dtype(
        use_fallback, cuda_branch_ops, op, dtype, device):
    """fp16 and bf16 in, forward and backward, through mmcv's autograd Functions: outputs
    and gradients in the input's dtype, each the fp32 result rounded once (computed in fp32:
    torchvision has no bf16 RoIAlign kernel; the others keep fp32's sums)."""
    run, inputs = _low_precision_op(op, dtype, device, torch.Generator().manual_seed(3))
    low = [t.to(device, dtype).requires_grad_() for t in inputs]
    ref_in = [t.detach().float().requires_grad_() for t in low]
    out, ref = run(*low), run(*ref_in)
    grad = torch.randn(ref.shape, generator=torch.Generator().manual_seed(4)).to(device, dtype)
    out.backward(grad)
    ref.backward(grad.float())
    assert out.dtype == dtype
    torch.testing.assert_close(out, ref.to(dtype), rtol=0, atol=0)
    for a, b in zip(low, ref_in):
        assert a.grad.dtype == dtype
        if op == 'sigmoid_focal_loss':      # mmcv scales the kernel's gradient in the dtype
            torch.testing.assert_close(a.grad.float(), b.grad, rtol=1e-2, atol=1e-3)
        else:
            torch.testing.assert_close(a.grad, b.grad.to(dtype), rtol=0, atol=0)

# --------------------------------------- op modules the stand-in cannot serve: refused early
def _unserved_forward(cls):
    """A small instance of ``cls`` built past the refusal, and a call of its forward."""
    carafe, deform_conv, deform_roi_pool, modulated_deform_conv, psa_mask, roi_pool = (
        sys.modules[f'mmcv.ops.{name}'] for name in (
            'carafe', 'deform_conv', 'deform_roi_pool', 'modulated_deform_conv', 'psa_mask',
            'roi_pool'))      # (as attributes of mmcv.ops, some of these names are functions)
    x = torch.rand(1, 4, 6, 6)
    rois = torch.tensor([[0., 0., 0., 4., 4.]])
    args, call = {
        deform_conv.DeformConv2d: ((4, 4, 3, 1, 1), lambda m: m(x, torch.zeros(1, 18, 6, 6))),
        modulated_deform_conv.ModulatedDeformConv2d: (
            (4, 4, 3, 1, 1), lambda m: m(x, torch.zeros(1, 18, 6, 6), torch.ones(1, 9, 6, 6))),
        carafe.CARAFENaive: ((3, 1, 2), lambda m: m(x, torch.rand(1, 9, 12, 12))),
        carafe.CARAFE: ((3, 1, 2), lambda m: m(x, torch.rand(1, 9, 12, 12))),
        carafe.CARAFEPack: ((4, 2), lambda m: m(x)),
        psa_mask.PSAMask: (('collect', (3, 3)), lambda m: m(torch.rand(1, 9, 6, 6))),
        deform_roi_pool.DeformRoIPool: ((2,), lambda m: m(x, rois)),
        roi_pool.RoIPool: ((2, 1.0), lambda m: m(x, rois)),
    }[cls]
    module = cls.__new__(cls)
    cls.__init__.__wrapped__(module, *args)
    return lambda: call(module)


def requested_functions(module) -> list:
    """The ``mmcv._ext`` functions an mmcv op module asks mmcv's loader for (its
    ``ext_loader.load_ext('_ext', [...])`` call, read from its source)."""
    import ast
    import inspect
    names = []
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        if isinstance(node, ast.Call) and getattr(node.func, 'attr', None) == 'load_ext':
            for arg in node.args[1:2]:
                names += [e.value for e in getattr(arg, 'elts', [])
                          if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return names


@pytest.mark.skipif(_inline_mm_mmcv_hook.backend() != 'fallback',
                    reason='a compiled mmcv answers mmcv._ext here')
def test_op_modules_the_stand_in_cannot_serve_refuse_to_be_built():
    import importlib
    from mmcv.cnn import build_conv_layer
    from mmdet.models.backbones import ResNet
    refused = [getattr(importlib.import_module(m), c)
               for m, (names, _) in FALLBACK.UNSERVED_MODULES.items() for c in names]
    assert len(refused) == 8
    for module, (_, functions) in FALLBACK.UNSERVED_MODULES.items():
        # the table names what mmcv's module asks for, none of it served here
        assert list(functions) == requested_functions(sys.modules[module]), module
        assert not set(functions) & set(FALLBACK.SERVED), module
    assert FALLBACK.unserved_refused()
    for cls in refused:
        functions = FALLBACK.UNSERVED_MODULES[cls.__module__][1]
        # the table is honest: forward needs one of the module's unserved functions ...
        with pytest.raises(NotImplementedError,
                           match=f"`({'|'.join(functions)})` needs .*INLINE_MM_MMCV=full"):
            _unserved_forward(cls)()
        with pytest.raises(NotImplementedError, match='as the model is built'):
            cls.__new__(cls).__init__()     # ... and building says so first
    # a config's model that asks for one fails as it is built, naming the class: here a
    # ResNet with DCNv2 in stages 2-4 (mmdet's *_dconv_c3-c5 configs)
    with pytest.raises(NotImplementedError, match=r'ModulatedDeformConv2dPack \(mmcv.ops'):
        ResNet(depth=50, dcn=dict(type='DCNv2', deform_groups=1, fallback_on_stride=False),
               stage_with_dcn=(False, True, True, True))
    with pytest.raises(NotImplementedError, match='DeformConv2dPack'):
        build_conv_layer(dict(type='DCN'), 4, 4, 3)
    # idempotent: a second pass wraps nothing again
    assert FALLBACK.refuse_unserved() == []



@pytest.mark.parametrize('dtype', LOW, ids=['fp16', 'bf16'])
def test_low_precision_on_fake_cuda_stays_on_the_device_in_the_input_dtype(dtype):
    """The stand-in's RoIAlign and focal loss, forward and backward, on CUDA tensors without
    a GPU (``FakeTensorMode``: devices and dtypes, no data; a CPU tensor mixed in would
    raise): computed in fp32 on the device, filled in the input's dtype. (The deformable
    attention reads its level sizes on the host, which fake tensors refuse.)"""
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode(allow_non_fake_inputs=True):
        cuda = dict(device='cuda', dtype=dtype)
        feats, rois = torch.randn(2, 4, 24, 24, **cuda), torch.rand(3, 5, device='cuda') * 9
        out, no_arg = torch.zeros(3, 4, 7, 7, **cuda), torch.zeros(0, **cuda)
        FALLBACK.roi_align_forward(feats, rois, out, no_arg, no_arg, 7, 7, 0.5, 2, 1, True)
        grad_in = torch.zeros_like(feats)
        FALLBACK.roi_align_backward(torch.randn(3, 4, 7, 7, **cuda), rois, no_arg, no_arg,
                                    grad_in, 7, 7, 0.5, 2, 1, True)
        logits, labels = torch.randn(40, 6, **cuda), torch.zeros(40, dtype=torch.long,
                                                                 device='cuda')
        loss, grad = torch.zeros_like(logits), torch.zeros_like(logits)
        FALLBACK.sigmoid_focal_loss_forward(logits, labels, no_arg, loss)
        FALLBACK.sigmoid_focal_loss_backward(logits, labels, no_arg, grad)
        for t in (out, grad_in, loss, grad):
            assert (t.device.type, t.dtype) == ('cuda', dtype)


# ------------------------------------ compiled mmcv in bf16 (the row mmcv_ops_bf16), stubbed
class CompiledKernelStub:
    """mmcv's compiled ``_ext`` as far as its RoIAlign, focal loss, deformable attention and
    NMS kernels go: float, double and half dispatched (computed here by the stand-in), bf16
    refused with the kernels' error, and NMS boxes other than float refused as its kernel
    does; records the dtype of every call's first tensor."""

    def __init__(self):
        self.calls = []
        for name in ('roi_align_forward', 'roi_align_backward', 'sigmoid_focal_loss_forward',
                     'sigmoid_focal_loss_backward', 'ms_deform_attn_forward',
                     'ms_deform_attn_backward', 'nms'):
            setattr(self, name, self._kernel(name))

    def _kernel(self, name):
        def kernel(*args, **kwargs):
            tensors = [a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()]
            self.calls.append((name, tensors[0].dtype))
            if name == 'nms' and tensors[0].dtype != torch.float32:
                raise RuntimeError(f'expected scalar type Float but found {tensors[0].dtype}')
            if any(t.dtype == torch.bfloat16 for t in tensors):
                raise RuntimeError(f'"{name}_cuda_kernel" not implemented for \'BFloat16\'')
            return getattr(FALLBACK, name)(*args, **kwargs)
        return kernel


COMPILED_OP_MODULES = (mmcv_roi_align, mmcv_focal, mmcv_msda, mmcv_nms)


@pytest.fixture
def compiled_stub(monkeypatch):
    stub = CompiledKernelStub()
    for module in COMPILED_OP_MODULES:
        monkeypatch.setattr(module, 'ext_module', stub)
    return stub


@pytest.mark.parametrize('op', ['roi_align', 'sigmoid_focal_loss', 'ms_deform_attn'])
def test_compiled_mmcv_ops_take_bf16_through_the_patch_row(compiled_stub, op, monkeypatch):
    """bf16 stops in compiled mmcv's kernels; with the row on, the kernels get fp32 for bf16
    (fp16 and fp32 as they were) and the op returns bf16 forward and backward: the fp32
    result rounded once, as the stand-in's."""
    from inline_mm.patches import mmcv_bf16
    run, inputs = _low_precision_op(op, torch.bfloat16, 'cpu', torch.Generator().manual_seed(5))
    low = [t.to(torch.bfloat16).requires_grad_() for t in inputs]
    with pytest.raises(RuntimeError, match="not implemented for 'BFloat16'"):
        run(*low)
    assert not mmcv_bf16.installed()
    mmcv_bf16.install()
    mmcv_bf16.install()                                     # idempotent
    assert mmcv_bf16.installed()
    assert all(m.ext_module.ext is compiled_stub for m in COMPILED_OP_MODULES)
    ref_in = [t.detach().float().requires_grad_() for t in low]
    compiled_stub.calls.clear()
    out, ref = run(*low), run(*ref_in)
    grad = torch.randn(ref.shape, generator=torch.Generator().manual_seed(6))
    out.backward(grad.bfloat16())
    ref.backward(grad.bfloat16().float())
    assert {dtype for _, dtype in compiled_stub.calls} == {torch.float32}
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out, ref.bfloat16(), rtol=0, atol=0)
    for a, b in zip(low, ref_in):
        assert a.grad.dtype == torch.bfloat16
        tol = dict(rtol=1e-2, atol=1e-3) if op == 'sigmoid_focal_loss' else dict(rtol=0, atol=0)
        torch.testing.assert_close(a.grad.float(), b.grad.bfloat16().float(), **tol)
    compiled_stub.calls.clear()
    run(*[t.detach().half() for t in low])                  # a dtype the kernels have
    assert {dtype for _, dtype in compiled_stub.calls} == {torch.float16}


def test_compiled_mmcv_nms_takes_low_precision_boxes_through_the_patch_row(compiled_stub):
    """mmcv's NMS kernels read float boxes only (CPU bf16 autocast leaves the decoded boxes
    in bf16): with the row on they get fp32, and keep what fp32 boxes keep."""
    from inline_mm.patches import mmcv_bf16
    gen = torch.Generator().manual_seed(7)
    xy = torch.rand(300, 2, generator=gen) * 200
    boxes = torch.cat([xy, xy + torch.rand(300, 2, generator=gen) * 60 + 4], 1).bfloat16()
    scores = torch.rand(300, generator=gen).bfloat16()
    with pytest.raises(RuntimeError, match='expected scalar type Float'):
        nms(boxes, scores, 0.5)
    mmcv_bf16.install()
    for dtype in (torch.bfloat16, torch.float16):
        dets, keep = nms(boxes.to(dtype), scores.to(dtype), 0.5)
        assert dets.dtype == dtype and keep.dtype == torch.long
        assert torch.equal(keep, nms(boxes.float(), scores.float(), 0.5)[1])
    assert {d for name, d in compiled_stub.calls[1:]} == {torch.float32}


def test_compiled_mmcv_bf16_row_is_on_only_with_compiled_mmcv(monkeypatch):
    from inline_mm.patches import find
    row = find('mmcv_ops_bf16')
    assert row.needed()[0] == (_inline_mm_mmcv_hook.backend() == 'compiled')
    monkeypatch.setattr(_inline_mm_mmcv_hook, 'compiled_ext_present', lambda: True)
    assert row.needed()[0]


def test_batched_nms_past_split_thr_takes_bf16_scores_with_fp32_boxes():
    """The row ``nms_scores_dtype``: under CPU autocast mmdet's RoI head hands mmcv's
    batched_nms fp32 boxes and bf16 scores; past ``split_thr`` mmcv writes the kept scores
    into a bf16 tensor and stopped ("Index put requires ... dtypes match")."""
    from mmcv.ops import batched_nms

    from inline_mm.patches import find
    row = find('nms_scores_dtype')
    row.install()
    assert row.active()
    gen = torch.Generator().manual_seed(0)
    xy = torch.rand(40, 2, generator=gen) * 100
    boxes = torch.cat([xy, xy + 10 + torch.rand(40, 2, generator=gen) * 20], dim=1)
    scores = torch.rand(40, generator=gen)
    idxs = torch.randint(0, 3, (40,), generator=gen)
    cfg = dict(type='nms', iou_threshold=0.5, split_thr=5)       # the split path
    want, keep_want = batched_nms(boxes, scores.bfloat16().float(), idxs, dict(cfg))
    dets, keep = batched_nms(boxes, scores.bfloat16(), idxs, dict(cfg))
    assert torch.equal(keep, keep_want)
    assert torch.equal(dets[:, :4].float(), want[:, :4])
    assert torch.equal(dets[:, 4].float(), want[:, 4])
