"""python -m benchmarks.precision --quick: every pair, precision and mode runs end to end
(no timing is asserted: the machine is shared), the table and the CSVs are written, and
the run says whether the CPU computes bf16 (``inline_mm.env.bf16_support``)."""
import csv
import json
import subprocess
import sys

import pytest
from support import ROOT, subprocess_env

from benchmarks import precision
from inline_mm.env import bf16_support


@pytest.mark.subprocess
def test_quick_run_writes_every_pair_precision_and_mode(tmp_path):
    proc = subprocess.run([sys.executable, '-m', 'benchmarks.precision', '--quick', '--out-dir',
                           str(tmp_path)], capture_output=True, text=True,
                          env=subprocess_env(), cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    has_bf16, _ = bf16_support('cpu')
    assert ('bf16: computed by the CPU' if has_bf16 else 'bf16: EMULATED') in out
    assert '64x96, 1 thread(s), forward (no_grad):' in out and 'training + backward:' in out
    assert '(no CSwin in mmdet or mmseg)' in out
    rows = list(csv.DictReader(open(tmp_path / 'precision.csv')))
    models = {m for inline, (_, others) in precision.PAIRS.items()
              for m in [inline] + [o[0] for o in others]}
    assert {(r['model'], r['precision'], r['mode']) for r in rows} == {
        (m, p, mode) for m in models for p in precision.PRECISIONS for mode in precision.MODES}
    for r in rows:
        # Every InLine family runs in every precision; a counterpart may fail (mmdet's Swin
        # keeps its shift masks in fp32, so a pure bf16 Swin-T fails where it shifts): the
        # row then says why.
        if r['status'] != 'ok':
            assert not r['model'].startswith('InLine'), r
            assert r['status'].split(':')[0].endswith('Error'), r
            continue
        assert float(r['seconds']) > 0, r
        if r['mode'] == 'forward':
            assert 0 <= float(r['conversion_share']) < 1 and float(r['peak_share']) > 0, r
    assert '| InLine-Swin-T |' in out and '| Swin-T |' in out
    counts = list(csv.DictReader(open(tmp_path / 'precision_launches.csv')))
    assert {(r['model'], r['dtype']) for r in counts} == {
        (f, d) for f in ('InLineSwin', 'InLinePVT', 'InLineCSwin', 'InLineDeiT')
        for d in ('fp16', 'bf16')}
    assert json.loads((tmp_path / 'meta.json').read_text())['bf16_units'] == has_bf16


def test_bad_sizes_are_refused_with_the_form_to_use():
    for bad in (['--sizes', '800'], ['--sizes', '16x16'], ['--sizes', 'axb']):
        with pytest.raises(SystemExit):
            precision.parse_args(bad)
    args = precision.parse_args(['--full'])
    assert args.sizes == precision.FULL_SIZES and args.threads[0] == 1
