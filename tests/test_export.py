"""Every backbone of the family table traces and exports to ONNX with a free batch,
for one input size per graph, and refuses other sizes (``inline_mm.deploy.backbone``)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from inline_mm.deploy.backbone import SizeLocked, check_onnx, export_onnx, run_onnx, trace_backbone
from inline_mm.models import FAMILIES
from support import quiet_tracer, smoke_backbone

ROOT = Path(__file__).resolve().parents[1]
#: a non-square size and an odd one (padding, window clipping, odd merges)
SIZES = [(64, 96), (75, 61)]


@pytest.fixture(autouse=True)
def _quiet_tracer():
    with quiet_tracer():
        yield


def _smoke(name):
    return smoke_backbone(name).eval()


@pytest.mark.parametrize('name', list(FAMILIES))
def test_jit_trace_free_batch_fixed_size(name):
    model = _smoke(name)
    traced = trace_backbone(model, SIZES[0], batch=2)
    x = torch.randn(3, 3, *SIZES[0])
    with torch.no_grad():
        for got, ref in zip(traced(x), model(x)):
            torch.testing.assert_close(got, ref, rtol=0, atol=1e-4)
        with pytest.raises(torch.jit.Error, match='made for 64x96 input'):
            traced(torch.randn(1, 3, 96, 64))
        # eager use of the wrapper refuses too
        with pytest.raises(RuntimeError, match='made for 64x96 input'):
            SizeLocked(model, SIZES[0])(torch.randn(1, 3, 64, 64))


@pytest.mark.parametrize('name', list(FAMILIES))
def test_complexity_counter_runs(name):
    get_model_complexity_info = pytest.importorskip('mmengine.analysis').get_model_complexity_info
    result = get_model_complexity_info(_smoke(name), input_shape=(3, 64, 96), show_table=False,
                                       show_arch=False)
    assert result['flops'] > 0 and result['params'] > 0


@pytest.mark.parametrize('name', list(FAMILIES))
def test_onnx_matches_pytorch_at_each_exported_size(name, tmp_path):
    pytest.importorskip('onnx')
    pytest.importorskip('onnxruntime')
    model = _smoke(name)
    for size in SIZES:
        path = export_onnx(model, str(tmp_path / f'{name}.onnx'), size)
        errors = check_onnx(path, model, size, batches=(1, 3))
        assert max(errors.values()) < 1e-4, (size, errors)
    # the last graph (75x61) refuses another size instead of running on it
    with pytest.raises(Exception, match='invalid dimensions'):
        run_onnx(path, torch.randn(1, 3, 64, 96))


def test_onnx_graph_itself_checks_the_size(tmp_path):
    """The broadcast check is in the graph, for runtimes that ignore declared shapes."""
    onnx = pytest.importorskip('onnx')
    path = export_onnx(_smoke('InLineSwin'), str(tmp_path / 'swin.onnx'), SIZES[0])
    graph = onnx.load(path).graph
    dims = [d.dim_param or d.dim_value for d in graph.input[0].type.tensor_type.shape.dim]
    assert dims == ['batch', 3, 64, 96]
    first = [n for n in graph.node if 'input' in n.input][0]
    assert first.op_type == 'Add'


@pytest.mark.subprocess
def test_export_tool(tmp_path):
    pytest.importorskip('onnxruntime')
    out = tmp_path / 'pvt.onnx'
    proc = subprocess.run(
        [sys.executable, str(ROOT / 'tools' / 'deployment' / 'export_onnx.py'),
         '--family', 'InLinePVT',
         '--arch', 'smoke', '--size', '64', '96', '--batches', '1', '2', '--out', str(out)],
        capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out.exists() and max(report['max_abs_err'].values()) < 1e-4
