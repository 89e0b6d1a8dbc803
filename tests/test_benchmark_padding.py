"""python -m benchmarks --padding: the CI-sized run end to end (no timing is asserted: the
machine is shared). Every family, mode, size, condition and variant is measured, the
table and the CSV are written, and the batches are what their conditions say."""
import csv
import importlib.util
import json

import pytest
from support import run_quick_benchmark

from benchmarks import padding
from inline_mm.models import FAMILIES
from inline_mm.models.padding import detect_valid_sizes


def _sizes(x):
    """Each image's ``(h, w)`` as read from the batch (a ``(B, 2)`` tensor)."""
    return [tuple(s) for s in detect_valid_sizes(x).tolist()]


def _load_tool():
    return importlib.import_module('benchmarks.__main__')


@pytest.mark.subprocess
def test_quick_run_writes_table_and_csv(tmp_path):
    out = run_quick_benchmark(tmp_path, '--padding')
    for header in ('CPU inference (forward, no_grad)', 'CPU training (forward + backward)',
                   'aware/plain', 'plain = pad_aware=False, aware = pad_aware=True'):
        assert header in out, header

    with open(tmp_path / 'padding.csv') as f:
        rows = list(csv.DictReader(f))

    def key(r):
        return (r['family'], r['mode'], f'{r["height"]}x{r["width"]}', r['condition'],
                r['pad_aware'])
    expected = {(fam, mode, f'{h}x{w}', cond, aware)
                for fam in FAMILIES for mode in ('inference', 'training')
                for h, w in padding.QUICK_SIZES for cond in ('none', 'padded')
                for aware in ('False', 'True')}
    assert sorted(map(key, rows)) == sorted(expected)
    for r in rows:
        assert r['status'] == 'ok' and r['device'] == 'cpu' and r['arch'] == 'smoke', r
        assert int(r['runs']) == 2 and r['batch'] == '2' and r['threads'] == '1', r
        assert 0 < float(r['min_ms']) <= float(r['median_ms']) <= float(r['max_ms']), r
        assert float(r['peak_mib']) > 0 and float(r['memory_vs_plain']) > 0, r
        assert float(r['time_vs_plain']) > 0, r
        if r['pad_aware'] == 'False':
            assert float(r['time_vs_plain']) == float(r['memory_vs_plain']) == 1.0, r
        h, w = int(r['height']), int(r['width'])
        canvas = (int(r['canvas_height']), int(r['canvas_width']))
        assert canvas == (-(-h // 32) * 32, -(-w // 32) * 32), r
        full = f'{canvas[0]}x{canvas[1]}'
        small = f'{int(h * 3 / 4)}x{int(w * 3 / 4)}'
        assert r['images'] == (f'{full}+{full}' if r['condition'] == 'none'
                               else f'{full}+{small}'), r
    # one table row per (family, canvas, condition) and mode, with the ratio
    table_rows = [line for line in out.splitlines() if line.startswith(tuple(FAMILIES))]
    assert len(table_rows) == len(rows) // 2, out[-3000:]
    assert all(line.rstrip().endswith('x') for line in table_rows), table_rows

    meta = json.loads((tmp_path / 'meta.json').read_text())
    assert meta['arguments']['padding'] is True and meta['arguments']['quick'] is True


def test_batches_are_what_their_conditions_say():
    # 800x1333 on mmdet's canvas: 11 zero columns, so "no padding" fills the canvas
    assert padding.canvas((800, 1333)) == (800, 1344)
    assert padding.canvas((1024, 1024)) == (1024, 1024)
    x = padding.make_batch((800, 1333), 'none', 2)
    assert x.shape == (2, 3, 800, 1344)
    assert detect_valid_sizes(x).tolist() == [[800, 1344]] * 2
    x = padding.make_batch((800, 1333), 'padded', 3)
    assert detect_valid_sizes(x).tolist() == [[800, 1344], [600, 999], [600, 999]]
    assert padding.image_sizes((1024, 1024), 'padded', 2) == [(1024, 1024), (768, 768)]
    # the benchmark refuses to time a batch its model does not read as the condition
    model = padding.build_model('InLineSwin', quick=True)
    padding.check_condition(model, padding.make_batch((64, 96), 'padded', 2), 'padded')
    with pytest.raises(RuntimeError, match='would not time'):
        padding.check_condition(model, padding.make_batch((64, 96), 'none', 2), 'padded')


def test_padding_arguments():
    tool = _load_tool()
    args = tool.parse_args(['--padding'])
    assert args.batch == 2 and args.models == list(FAMILIES)
    assert args.sizes == [(1024, 1024), (800, 1333)]      # by pixels, as for every run
    assert args.conditions == ['none', 'padded'] and args.repeats == 5
    assert tool.parse_args([]).batch == 1
    for argv in (['--padding', '--batch', '1'], ['--padding', '--deit'],
                 ['--padding', '--attention'], ['--padding', '--models', 'Swin-T'],
                 ['--models', 'InLineSwin'], ['--padding', '--conditions', 'half']):
        with pytest.raises(SystemExit):
            tool.parse_args(argv)


def test_sweep_cases_and_their_batches():
    """--sweep: batch 2 at 800x1344 and batch 4 at 512x768, the second image at 1/2, 3/4
    and 15/16 of each side, the others full; each batch reads as its sizes."""
    cases = padding.sweep_cases()
    assert [(s, b) for s, b, _ in cases] == [((800, 1344), 2)] * 3 + [((512, 768), 4)] * 3
    assert padding.image_sizes((800, 1344), 'second15/16', 2) == [(800, 1344), (750, 1260)]
    assert padding.image_sizes((512, 768), 'second1/2', 4) == \
        [(512, 768), (256, 384), (512, 768), (512, 768)]
    x = padding.make_batch((512, 768), 'second3/4', 4)
    assert _sizes(x) == [(512, 768), (384, 576), (512, 768), (512, 768)]
    with pytest.raises(ValueError, match='second<fraction>'):
        padding.image_sizes((64, 96), 'second1/3', 2)
    tool = _load_tool()
    args = tool.parse_args(['--padding', '--sweep', '--quick', '--models', 'InLineDeiT',
                            '--modes', 'inference', '--repeats', '1', '--warmup', '0'])
    results = padding.run(args, padding.torch.device('cpu'))
    assert sorted({(r.condition, len(r.images)) for r in results}) == sorted(
        (c, b) for _, b, c in padding.sweep_cases(quick=True))
    assert all(r.status == 'ok' and len(r.cpu_times) == 1 for r in results)
    with pytest.raises(SystemExit):
        tool.parse_args(['--sweep'])
