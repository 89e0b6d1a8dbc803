"""python -m benchmarks --deit: the CI-sized run end to end (no timing is asserted: the
machine is shared). Every model, mode and size is measured; the speed-up table, the
attention / linear-layer split and the outputs are written."""
import csv
import json

import pytest
from support import run_quick_benchmark


@pytest.mark.subprocess
def test_quick_run_writes_ratio_table_split_csv_and_plot(tmp_path):
    out = run_quick_benchmark(tmp_path, '--deit')
    for header in ('CPU inference (forward, no_grad)', 'CPU training (forward + backward)',
                   'DeiT-T / InLine', 'DeiT-T-sdpa / InLine', 'paper (GPU)',
                   'InLine attention / linear layers =', 'Softmax (SDPA) attention'):
        assert header in out, header
    with open(tmp_path / 'deit.csv') as f:
        rows = list(csv.DictReader(f))
    models = {'InLine-DeiT-T', 'DeiT-T', 'DeiT-T-sdpa'}
    assert {(r['model'], r['mode'], r['height'], r['width']) for r in rows} == {
        (m, mode, h, w) for m in models for mode in ('inference', 'training')
        for h, w in (('64', '64'), ('96', '128'))}
    for r in rows:
        assert r['status'] == 'ok' and int(r['runs']) == 2, r
        assert float(r['speedup_vs_inline']) > 0
        assert r['tokens'] == str(1 + -(-int(r['height']) // 16) * -(-int(r['width']) // 16))
        if r['model'] == 'InLine-DeiT-T':
            assert float(r['speedup_vs_inline']) == 1.0
    with open(tmp_path / 'deit_split.csv') as f:
        split = list(csv.DictReader(f))
    assert {(r['mode'], r['part']) for r in split} == {
        (mode, part) for mode in ('inference', 'training')
        for part in ('InLine attention proper', 'linear layers (qkv, proj, MLP)',
                     'Softmax attention proper (SDPA)')}
    assert all(r['tokens'] == str(1 + 6 * 6) for r in split)
    png = (tmp_path / 'deit.png').read_bytes()
    assert png[:8] == b'\x89PNG\r\n\x1a\n' and len(png) > 10_000
    assert json.loads((tmp_path / 'meta.json').read_text())['arguments']['quick'] is True
