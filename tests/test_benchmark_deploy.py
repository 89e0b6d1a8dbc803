"""python -m benchmarks.deploy: the CI-sized run of the ONNX Runtime comparison, in-process
(no timing is asserted: the machine is shared). Every model is exported the same way, runs in
ONNX Runtime to the eager result, and is timed in interleaved rounds in both runtimes."""
import csv
import json

import pytest

from benchmarks import deploy


# (machine_info asks `uname -p` for the processor)
@pytest.mark.subprocess
def test_quick_run_exports_checks_times_and_writes(tmp_path, capsys):
    times, errors = deploy.main(['--quick', '--models', 'InLine-Swin-T', 'Swin-T',
                                 '--out-dir', str(tmp_path)])
    assert set(errors) == {'InLine-Swin-T', 'Swin-T'}
    assert all(e < 1e-4 for e in errors.values()), errors      # ORT computes what eager does
    out = capsys.readouterr().out
    assert '| InLine-Swin-T / Swin-T | onnxruntime |' in out
    assert '| InLine-Swin-T / Swin-T | eager |' in out
    with open(tmp_path / 'deploy.csv') as f:
        rows = list(csv.DictReader(f))
    assert {(r['model'], r['runtime'], r['round']) for r in rows} == {
        (m, rt, str(i)) for m in errors for rt in ('onnxruntime', 'eager') for i in range(2)}
    assert all(float(r['seconds']) > 0 for r in rows)
    meta = json.loads((tmp_path / 'meta.json').read_text())
    assert meta['size'] == [96, 128] and meta['rounds'] == 2 and meta['onnxruntime']


# (machine_info asks `uname -p` for the processor)
@pytest.mark.subprocess
def test_whole_models_quick_run_checks_times_and_writes(tmp_path, capsys):
    """python -m benchmarks --deploy --quick: the toy detector and segmentor exported as the
    padded and the canvas-filling graph, their results in ONNX Runtime checked against
    PyTorch, then timed interleaved with PyTorch fp32 (and bf16 autocast where the CPU has
    bf16 units)."""
    from benchmarks import deploy_whole
    from inline_mm.env import bf16_support
    times, checks = deploy_whole.main(['--quick', '--threads', '1', '--clock', 'cpu',
                                       '--out-dir', str(tmp_path)])
    for graph in ('padded', 'filled'):
        det = checks['mask_rcnn_toy'][f'onnxruntime {graph}']
        assert det['matched'] == det['detections_pytorch'] == det['detections_onnxruntime'], det
        seg = checks['upernet_toy'][f'onnxruntime {graph}']
        assert seg['worst_image_agreement'] >= 0.999, checks
    columns = {deploy_whole.label(k[2]) for k in times}
    assert columns >= {'pytorch', 'onnxruntime padded', 'onnxruntime filled'}, columns
    assert ('pytorch bf16' in columns) == bf16_support('cpu')[0], columns
    out = capsys.readouterr().out
    assert '| mask_rcnn_toy | 1 |' in out and '| onnxruntime filled |' in out
    assert '(CPU time of this process)' in out
    with open(tmp_path / 'deploy_whole.csv') as f:
        rows = list(csv.DictReader(f))
    assert rows and all(float(r['seconds']) > 0 and float(r['cpu_seconds']) > 0 for r in rows)
    meta = json.loads((tmp_path / 'deploy_whole_meta.json').read_text())
    assert meta['rounds'] == 1 and meta['checks'] == json.loads(json.dumps(checks))
