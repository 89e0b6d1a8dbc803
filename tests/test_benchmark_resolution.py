"""python -m benchmarks --resolution: the CI-sized run end to end (no timing is asserted:
the machine is shared), and the probe that lets the smallest size be predicted and skipped.
"""
import csv
import json
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn

from benchmarks import resolution
from benchmarks.backbones import run_backbones
from support import run_quick_benchmark


@pytest.mark.subprocess
def test_quick_run_measures_backbones_and_segmentors_and_writes_csv_and_plot(tmp_path):
    # a generous limit: the shared machine's load must not skip a CI-sized step
    out = run_quick_benchmark(tmp_path, '--resolution', '--max-run-s', '300')
    for header in ('CPU backbone, whole-image inference', 'CPU segmentor, whole-image inference',
                   'Swin-T / InLine-Swin-T', 'Swin-T-global / InLine-Swin-T',
                   'PVT-S / InLine-PVT-S'):
        assert header in out, header
    with open(tmp_path / 'resolution.csv') as f:
        rows = list(csv.DictReader(f))
    assert {(r['part'], r['model'], r['height'], r['width']) for r in rows} == {
        (part, m, str(h), str(w)) for part in resolution.PARTS for m in resolution.MODELS
        for h, w in resolution.QUICK_SIZES}
    for r in rows:
        assert r['status'] == 'ok' and int(r['runs']) == 2, r
        assert float(r['min_ms']) <= float(r['median_ms']) <= float(r['max_ms'])
        assert float(r['peak_mib']) > 0
    seg = {(r['model'], r['height']): float(r['peak_mib']) for r in rows
           if r['part'] == 'segmentor'}
    bb = {(r['model'], r['height']): float(r['peak_mib']) for r in rows
          if r['part'] == 'backbone'}
    assert all(seg[k] > bb[k] for k in seg)     # the head's maps come on top
    png = (tmp_path / 'resolution.png').read_bytes()
    assert png[:8] == b'\x89PNG\r\n\x1a\n' and len(png) > 10_000
    assert json.loads((tmp_path / 'meta.json').read_text())['arguments']['resolution'] is True


class _Quadratic(nn.Module):
    """A stand-in whose cost grows with the square of the pixels (a global Softmax)."""

    def forward(self, x):
        t = x.flatten(2)
        return (t.transpose(1, 2) @ t,)


@pytest.mark.parametrize('limit,expected', [(1e-9, 'skipped: est.'), (1e9, 'ok')])
def test_probe_predicts_even_the_smallest_size(limit, expected):
    args = SimpleNamespace(sizes=[(32, 64), (64, 128)], models=['m'], modes=['inference'],
                           batch=1, warmup=1, repeats=1, max_run_s=limit, max_mem_gb=None)
    results = run_backbones(args, torch.device('cpu'), {'m': _Quadratic()}, probe=True)
    assert [r.size for r in results] == args.sizes
    assert all(r.status.startswith(expected) for r in results), [r.status for r in results]
    assert all(bool(r.times) == (expected == 'ok') for r in results)


def test_segmentors_are_the_shipped_cityscapes_recipes_around_each_backbone():
    """(The quick run above runs all five; here the swap of mmdet's PVT-S into mmseg's
    Semantic FPN of the shipped config, without running it.)"""
    model = resolution.build_segmentor('PVT-S').segmentor
    assert type(model.backbone) is type(resolution.MODELS['PVT-S'][0]())
    assert type(model.decode_head).__name__ == 'FPNHead'
    assert model.decode_head.num_classes == 19 and model.test_cfg.mode == 'whole'
