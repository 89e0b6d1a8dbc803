"""The path every GPU user takes, checked on every CI run without a GPU.

PyTorch's ``FakeTensorMode`` makes ``cuda`` tensors that carry shapes, dtypes and devices
but no data, so the backbones' default forward on a CUDA batch runs here as it would on a
device, with three faults made loud (DESIGN.md, "On the device users train on"):

* a CPU tensor mixed into the forward raises ``FakeTensorDeviceMismatchError``;
* a host read (``.item()``, ``.tolist()``, ``nonzero``, a bool of a tensor) raises
  ``DataDependentOutputException`` (or ``DynamicOutputShapeException``);
* autocast follows CUDA's rules; it is forced on (``torch.autocast('cuda')`` switches
  itself off on a machine without CUDA) and the dtypes are asserted.

The forward is the default one (the path is chosen from the input's device) on padded
batches of 2 and 8, and the tests assert that the batched path ran: the ops a forward
dispatches do not grow with the batch, and no per-sample kernel (a custom autograd
Function of inline_mm) is in the autograd graph. The shipped detectors' and segmentors'
dense parts (backbone, neck, RPN / dense / decode heads) run the same way. A backward
cannot run on fake CUDA (the autograd engine asks the CUDA driver for a context); it runs
on fake CPU tensors with the batched path forced: the same ops, and host reads still raise.

Run these alone with ``pytest -m fake_cuda`` (or ``pytest tests/test_fake_cuda.py``); the
real-device checks are ``tools/dev/gpu/cuda_check.py``.
"""
import contextlib
import copy
from typing import List

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from benchmarks.launches import OpCounter
from inline_mm.analysis.memory import cuda_autocast as autocast
from inline_mm.models import FAMILIES
from support import ROOT, shrink_detector, shrink_segmentor, smoke_backbone

pytestmark = pytest.mark.fake_cuda

DTYPES = {'fp32': None, 'fp16': torch.float16, 'bf16': torch.bfloat16}
#: the products autocast runs in its low dtype on CUDA
_MATMULS = ('aten.mm.', 'aten.addmm.', 'aten.bmm.', 'aten.baddbmm.', 'aten.convolution.',
            'aten._scaled_dot_product')


@contextlib.contextmanager
def fake(device: str):
    """A ``FakeTensorMode`` in which real tensors (a model's parameters, a batch made on
    the host) may enter, become fake, and move to ``device`` without data. Without a shape
    environment (unlike ``inline_mm.analysis.memory.fake_cuda``'s), so that a host read raises
    instead of becoming a symbol."""
    with FakeTensorMode(allow_non_fake_inputs=True):
        yield torch.device(device)


def padded_batch(b: int, hw=(96, 128), device='cuda') -> torch.Tensor:
    """A batch as the data preprocessors give it (fake: no values; the backbones read the
    padding from it on the device, whatever it holds)."""
    return torch.randn(b, 3, *hw, device=device)


def kernels_in_graph(outputs) -> List[str]:
    """The custom autograd Functions of inline_mm in the graph behind ``outputs``: the
    per-sample path's kernels (the batched path is plain differentiable ops)."""
    seen, found = set(), []
    todo = [o.grad_fn for o in outputs if o.grad_fn is not None]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        cls = getattr(node, '_forward_cls', None)
        if cls is not None and cls.__module__.startswith('inline_mm'):
            found.append(cls.__name__)
        todo += [n for n, _ in node.next_functions]
    return found


def run_recorded(fn):
    """``fn()`` under an op recorder: its result and the recorder."""
    with OpCounter(record=True) as ops:
        out = fn()
    return out, ops


def assert_on_device(ops: OpCounter, device: str):
    """Every tensor every op read or made is on ``device`` (CPU scalars aside: CUDA ops
    take them as values)."""
    stray = [op for op in ops.seen for d in op.devices + op.out_devices if d != device]
    assert not stray, f'ops on another device than {device}: {stray[:3]}'


def assert_autocast(ops: OpCounter, dtype):
    """The products ran in ``dtype`` (autocast really on), and only in it or fp32."""
    products = [op for op in ops.seen if op.name.startswith(_MATMULS)]
    assert products
    low = [op for op in products if dtype in op.out_dtypes]
    assert low, f'no product ran in {dtype}: autocast was off'
    other = {d for op in products for d in op.out_dtypes} - {dtype, torch.float32}
    assert not other, other


# --------------------------------------------------------------------------- backbones
@pytest.fixture(params=list(FAMILIES))
def backbone(request):
    """A family's smoke model in eval mode, with gradients on (the autograd graph shows
    which path ran); the default path (by device)."""
    return smoke_backbone(request.param, seed=0).eval()


@pytest.mark.parametrize('dtype', list(DTYPES))
def test_default_forward_on_cuda_is_the_batched_path(backbone, dtype):
    low = DTYPES[dtype]
    counts = {}
    with fake('cuda'):
        model = backbone.to('cuda')
        for b in (2, 8, 2):       # (the first forward also makes what the model caches)
            x = padded_batch(b)
            with autocast(low):
                outs, ops = run_recorded(lambda: model(x))
            counts[b] = ops.ops
            assert ops.reads == 0
            assert_on_device(ops, 'cuda')
            if low is not None:
                assert_autocast(ops, low)
            for i, o in zip(model.out_indices, outs):
                assert o.device == x.device and o.dtype == torch.float32
                assert o.shape[:2] == (b, model.dims[i])
            assert not kernels_in_graph(outs)
    # One launch per op on a device: the batched path's count does not grow with the batch.
    assert counts[8] == counts[2], counts


@pytest.mark.parametrize('family', list(FAMILIES))
def test_backward_of_the_batched_path_on_fake_cpu(family):
    """The forward's ops and their backward, on fake CPU tensors with the batched path
    forced (a backward on fake CUDA stops in the autograd engine)."""
    counts = {}
    model = smoke_backbone(family, seed=0, batched=True)
    with fake('cpu'):
        for b in (2, 8, 2):
            x = padded_batch(b, device='cpu').requires_grad_()

            def step():
                outs = model(x)
                assert not kernels_in_graph(outs)
                sum(o.square().mean() for o in outs).backward()
            _, ops = run_recorded(step)
            counts[b] = ops.ops
            assert ops.reads == 0
            assert x.grad.shape == x.shape
            grads = [p.grad for p in model.parameters() if p.requires_grad]
            assert grads and all(g is not None for g in grads)
            model.zero_grad(set_to_none=True)
    assert counts[8] == counts[2], counts


def test_a_cpu_tensor_and_a_host_read_fail_on_fake_cuda():
    """The two faults these tests exist for are loud under the mode (so a pass means
    neither happened)."""
    from torch._subclasses.fake_tensor import (DataDependentOutputException,
                                               FakeTensorDeviceMismatchError)
    with fake('cuda'):
        x = torch.randn(2, 8, device='cuda')
        with pytest.raises(FakeTensorDeviceMismatchError):
            x + torch.arange(8.0)
        with pytest.raises(DataDependentOutputException):
            x.sum().item()
        with pytest.raises(DataDependentOutputException):
            x.sum(0).tolist()


# --------------------------------------------------------------------------- detectors
#: shipped configs whose data-independent dense parts run on fake CUDA: what runs of each
DENSE = {
    'inline_swin/mask-rcnn_inline-swin-t_fpn_1x_coco.py': 'rpn',
    'inline_deit/mask-rcnn_inline-deit-s_simple-fpn_1x_coco.py': 'rpn',
    'inline_pvt/retinanet_inline-pvt-s_fpn_1x_coco.py': 'dense',
    # mmdet's DINO reads its levels' sizes to the host in its encoder (its own sync):
    # what runs is the backbone and the neck.
    'inline_swin/dino-4scale_inline-swin-t_8xb2-12e_coco.py': 'neck',
    'inline_swin/inline-swin-t-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py': 'decode',
    'inline_cswin/inline-cswin-t-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py': 'decode',
    'inline_pvt/fpn_inline-pvt-s_4xb4-40k_ade20k-512x512.py': 'decode',
}


@pytest.fixture(scope='module', params=list(DENSE))
def dense_built(request):
    """A shipped config's model, shrunk as every test shrinks them, initialised."""
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    cfg = Config.fromfile(str(ROOT / 'configs' / request.param))
    init_default_scope(cfg.default_scope)
    if cfg.default_scope == 'mmdet':
        from mmdet.registry import MODELS
        shrink_detector(cfg)
    else:
        from mmseg.registry import MODELS
        shrink_segmentor(cfg)
    model = MODELS.build(cfg.model)
    model.init_weights()
    return model.eval(), DENSE[request.param]


@pytest.fixture
def dense_model(dense_built):
    """A copy of the built model for one test (moving it to fake CUDA replaces its
    parameters)."""
    model, part = dense_built
    return copy.deepcopy(model), part


def _dense_forward(model, part: str, x: torch.Tensor):
    feats = model.extract_feat(x)
    if part == 'rpn':
        return list(feats) + [t for level in model.rpn_head(feats) for t in level]
    if part == 'dense':
        return list(feats) + [t for level in model.bbox_head(feats) for t in level]
    if part == 'decode':
        return list(feats) + [model.decode_head(feats)]
    return list(feats)


@pytest.mark.parametrize('dtype', list(DTYPES))
def test_detector_and_segmentor_dense_parts_on_cuda(dense_model, dtype):
    model, part = dense_model
    low = DTYPES[dtype]
    with fake('cuda'):
        net = model.to('cuda')
        x = padded_batch(2, (128, 160))
        with autocast(low):
            outs, ops = run_recorded(lambda: _dense_forward(net, part, x))
        assert ops.reads == 0
        assert_on_device(ops, 'cuda')
        if low is not None:
            assert_autocast(ops, low)
        assert outs and all(o.device == x.device and o.shape[0] == 2 for o in outs)
        assert not kernels_in_graph(outs)


def test_the_per_sample_kernel_is_caught_where_the_batched_path_should_run():
    """What the tests above rely on: the per-sample path, forced on fake CUDA, fails them
    (its one host read of the sizes, and its kernels in the graph)."""
    from torch._subclasses.fake_tensor import DataDependentOutputException
    model = smoke_backbone('InLinePVT', seed=0, batched=False).eval()
    with fake('cuda'):
        model = model.to('cuda')
        with pytest.raises(DataDependentOutputException):
            model(padded_batch(2))
        outs = model(padded_batch(2), valid_sizes=[(96, 128), (64, 96)])
        assert kernels_in_graph(outs)
