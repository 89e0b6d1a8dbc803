"""What every backbone does under the tracers users reach for without ``inline_mm.deploy.backbone``:
a plain ``torch.jit.trace`` or ``torch.onnx.export`` graph refuses another input size
(never silently wrong), ``torch.jit.script`` refuses plainly, and ``torch.fx`` traces
(torchvision's feature extraction included)."""
import pytest
import torch
from support import fx_trace_matching, quiet_tracer, smoke_backbone
from torchvision.models.feature_extraction import create_feature_extractor

from inline_mm.models import FAMILIES

#: two sizes with the same token count whose windows, shifts and padding differ
TRACED, OTHER = (64, 128), (128, 64)


@pytest.fixture(autouse=True)
def _quiet_tracer():
    with quiet_tracer():
        yield


def _smoke(name):
    return smoke_backbone(name, seed=0).eval()


@pytest.mark.parametrize('name', list(FAMILIES))
def test_plain_jit_trace_refuses_another_size(name):
    model = _smoke(name)
    x = torch.randn(1, 3, *TRACED)
    with torch.no_grad():
        graph = torch.jit.trace(model, x, check_trace=False)
        batch = torch.randn(2, 3, *TRACED)
        for got, ref in zip(graph(batch), model(batch)):          # the batch stays free
            torch.testing.assert_close(got, ref, rtol=0, atol=1e-5)
        with pytest.raises(torch.jit.Error, match='made for 64x128 input'):
            graph(torch.randn(1, 3, *OTHER))


@pytest.mark.parametrize('name', ['InLineSwin', 'InLineDeiT'])
def test_plain_onnx_export_refuses_another_size(name, tmp_path):
    ort = pytest.importorskip('onnxruntime')
    model = _smoke(name)
    path = str(tmp_path / 'model.onnx')
    # Height and width declared dynamic, so only the graph itself can refuse them.
    axes = {'input': {0: 'b', 2: 'h', 3: 'w'}}
    with torch.no_grad():
        torch.onnx.export(model, (torch.randn(1, 3, *TRACED),), path, input_names=['input'],
                          dynamic_axes=axes, opset_version=17, dynamo=False)
    session = ort.InferenceSession(path, providers=['CPUExecutionProvider'])
    x = torch.randn(2, 3, *TRACED)
    with torch.no_grad():
        ref = model(x)
    for got, r in zip(session.run(None, {'input': x.numpy()}), ref):
        torch.testing.assert_close(torch.from_numpy(got), r, rtol=0, atol=1e-4)
    with pytest.raises(Exception, match='(?i)broadcast|dimension|shape'):
        session.run(None, {'input': torch.randn(1, 3, *OTHER).numpy()})


def test_jit_script_refuses_plainly():
    with pytest.raises(RuntimeError, match='cannot be compiled by torch.jit.script'):
        torch.jit.script(_smoke('InLineSwin'))


@pytest.mark.parametrize('name', list(FAMILIES))
def test_fx_symbolic_trace_any_size(name):
    graph = fx_trace_matching(_smoke(name))
    with pytest.raises(ValueError, match='expects a \\(B, C, H, W\\) batch'):
        graph(torch.randn(3, 64, 64))                  # the input check runs with the graph
    with pytest.raises(ValueError, match='padding-unaware'):
        graph(torch.randn(1, 3, 64, 64), [(64, 32)])


@pytest.mark.parametrize('name', list(FAMILIES))
def test_create_feature_extractor_gives_block_outputs(name):
    model = _smoke(name)
    # Every block (each an FX leaf): the extractor's outputs are what eager computes there.
    blocks = {path: m for path, m in model.named_modules()
              if path.split('.')[-2:-1] == ['blocks']}
    assert blocks
    eager = {}
    hooks = [m.register_forward_hook(lambda mod, args, out, p=p: eager.__setitem__(p, out))
             for p, m in blocks.items()]
    x = torch.randn(2, 3, 70, 90)
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    extractor = create_feature_extractor(model, {f'{p}.fx_leaf_call': p for p in blocks})
    with torch.no_grad():
        got = extractor(x)
    assert set(got) == set(blocks)
    for p in blocks:
        torch.testing.assert_close(got[p], eager[p], rtol=0, atol=0)
