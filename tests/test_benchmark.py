"""python -m benchmarks: the CI-sized run end to end, and its measuring helpers
(``benchmarks``).

No timing is asserted here (the machine is shared; the performance criteria are in
tests/test_performance.py); what is checked is that every model and mode produced a
measurement, that the outputs are written, and that the memory measurement and the
skip prediction compute what they say.
"""
import csv
import importlib.util
import json
import math

import pytest
import torch
from support import run_quick_benchmark

from benchmarks import backbones
from benchmarks.measure import cpu_peak_bytes, predict


def _load_tool():
    return importlib.import_module('benchmarks.__main__')


@pytest.mark.subprocess
def test_quick_run_writes_table_csv_and_plot(tmp_path):
    out = run_quick_benchmark(tmp_path)
    for header in ('CPU inference (forward, no_grad)', 'CPU training (forward + backward)',
                   'Swin-T / InLine-Swin-T', 'Swin-T-global / InLine-Swin-T',
                   'PVT-S / InLine-PVT-S', 'CPU attention', 'speed-up reference / production'):
        assert header in out, header

    with open(tmp_path / 'backbones.csv') as f:
        rows = list(csv.DictReader(f))
    expected = {(m, mode, f'{h}x{w}') for m in backbones.MODELS for mode in backbones.MODES
                for h, w in backbones.QUICK_SIZES}
    assert {(r['model'], r['mode'], f'{r["height"]}x{r["width"]}') for r in rows} == expected
    for r in rows:
        assert r['status'] == 'ok', r
        assert r['device'] == 'cpu' and int(r['runs']) == 2
        assert float(r['min_ms']) <= float(r['median_ms']) <= float(r['max_ms'])
        assert float(r['peak_mib']) > 0
        if r['mode'] == 'training':
            # the step allocates the parameter gradients: at least 4 bytes a parameter
            assert float(r['peak_mib']) > 20, r

    with open(tmp_path / 'attention.csv') as f:
        att = list(csv.DictReader(f))
    assert {(r['mode'], r['path'].split()[0]) for r in att} == {
        (mode, path) for mode in ('inference', 'training') for path in ('production', 'reference')}
    assert all(float(r['median_ms']) > 0 and float(r['peak_mib']) > 0 for r in att)

    png = (tmp_path / 'backbones.png').read_bytes()
    assert png[:8] == b'\x89PNG\r\n\x1a\n' and len(png) > 10_000
    meta = json.loads((tmp_path / 'meta.json').read_text())
    assert meta['torch'] == torch.__version__ and meta['arguments']['quick'] is True


def test_cpu_peak_bytes_counts_what_the_step_holds():
    keep = torch.ones(1)
    mib = 2 ** 20

    def step():
        a = torch.empty(4 * mib, dtype=torch.uint8)
        b = torch.empty(2 * mib, dtype=torch.uint8)
        del a
        c = torch.empty(1 * mib, dtype=torch.uint8)
        del b, c
        keep.mul_(2)        # an in-place op on an older tensor adds nothing

    assert cpu_peak_bytes(step) == 6 * mib
    # A tensor made in an earlier profiled step and freed in this one is not
    # credited against this step's own allocations.
    held = []
    cpu_peak_bytes(lambda: held.append(torch.empty(8 * mib, dtype=torch.uint8)))

    def step2():
        held.clear()
        torch.empty(3 * mib, dtype=torch.uint8)

    assert cpu_peak_bytes(step2) == 3 * mib


def test_predict_extrapolates_growth():
    assert predict([], 100) is None
    assert predict([(1, 2.0)], 3) == pytest.approx(18.0)            # quadratic from one size
    assert predict([(1, 1.0), (4, 4.0)], 16) == pytest.approx(16.0)  # measured linear
    assert predict([(1, 1.0), (4, 2.0)], 16) == pytest.approx(8.0)   # clamped to >= 1
    assert predict([(1, 1.0), (2, 8.0)], 4) == pytest.approx(8.0 * 2 ** 2.2)
    # the exponent comes from a size at most half as large, not from a near neighbour
    grow = math.log(4.5) / math.log(4.1)
    assert predict([(1, 1.0), (4, 4.0), (4.1, 4.5)], 8.2) == pytest.approx(4.5 * 2 ** grow)


def test_bad_arguments_are_refused():
    tool = _load_tool()
    for argv in (['--sizes', '16'], ['--sizes', '512x'], ['--batch', '0'], ['--repeats', '-1']):
        with pytest.raises(SystemExit):
            tool.parse_args(argv)
    assert tool.parse_args(['--sizes', '800x1333', '224']).sizes == [(224, 224), (800, 1333)]
