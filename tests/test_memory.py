"""The memory count before the run (``inline_mm.analysis.memory``,
``tools/analysis_tools/estimate_memory.py``, ``python -m benchmarks --memory``) on shrunken
shipped configs: it agrees with the CPU
allocator's peak of a real training step, AMP and ``with_cp`` (per stage) change it the way
they change a real step, detectors count their RoI heads at the config's sampler sizes, and
what it cannot count is refused with a clear error."""
import csv
import json

import pytest
import torch

from support import ROOT, write_tiny_config

from benchmarks import memory as bench
from benchmarks.__main__ import main as bench_main
from inline_mm.cli import estimate_memory as cli
from inline_mm.analysis.memory import MemoryCounter, count, cuda_autocast, optimizer_bytes

SHIPPED = {
    'upernet': 'configs/inline_swin/inline-swin-t-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py',
    'mask_rcnn': 'configs/inline_pvt/mask-rcnn_inline-pvt-t_fpn_1x_coco.py',
    'mask_rcnn_3x': 'configs/inline_pvt/mask-rcnn_inline-pvt-t_fpn_ms-crop-3x_coco.py',
    'cascade': 'configs/inline_swin/cascade-mask-rcnn_inline-swin-t_fpn_1x_coco.py',
    'retinanet': 'configs/inline_swin/retinanet_inline-swin-t_fpn_1x_coco.py',
}


@pytest.fixture(scope='module')
def tiny(tmp_path_factory):
    """The shipped configs with their models shrunk (pipelines, optimisers as shipped)."""
    tmp = tmp_path_factory.mktemp('memory')
    return {name: str(write_tiny_config(ROOT / path, tmp / f'{name}.py'))
            for name, path in SHIPPED.items()}


def test_count_agrees_with_the_cpu_allocator(tiny):
    """The check of ``python -m benchmarks --memory-check`` on the shrunken UperNet at
    128x128, batch 2: the count of a step against the CPU allocator's peak of a real one, with
    ``with_cp`` off and on every stage."""
    rows = bench.check(tiny['upernet'], {'model.data_preprocessor.size': (128, 128)}, rounds=0,
                       settings={'off': False, 'all': True})
    for row in rows:
        assert 0.9 <= row['ratio'] <= 1.1, row
    off, on = rows
    assert on['activations_gib'] < off['activations_gib']
    assert '| all |' in bench.check_table(rows)


def test_amp_and_with_cp_per_stage(tiny):
    with MemoryCounter(tiny['upernet']) as counter:
        assert counter.kind == 'segmentor' and counter.input_hw == (64, 64)
        fp32, fp16, bf16 = (counter.train(p) for p in ('fp32', 'fp16', 'bf16'))
        assert fp16.activations < fp32.activations and fp16.peak < fp32.peak
        assert (fp16.activations, fp16.peak) == (bf16.activations, bf16.peak)
        assert fp32.grads == counter.trainable and fp32.optimizer == 2 * fp32.grads  # AdamW
        # the update's working copy: the largest parameter group (paramwise_cfg: one each)
        assert 0 < counter.update_copy < counter.trainable
        assert fp32.uncounted == 0
        stages = counter.train('fp32', [0, 1])
        on = counter.train('fp32', True)
        assert on.with_cp is True and stages.with_cp == (0, 1)
        assert on.activations < stages.activations < fp32.activations
        test32, test16 = counter.test('fp32'), counter.test('fp16')
        assert test32.batch == 1 and test32.peak > test32.params
        assert test16.peak != test32.peak
        with pytest.raises(ValueError, match='precision must be one of'):
            counter.train('int8')
        with pytest.raises(ValueError, match='with_cp must be True, False or a list'):
            counter.train('fp32', [7])
    # the autocast state is restored
    assert not torch.is_autocast_enabled('cuda')
    with cuda_autocast(torch.bfloat16):
        assert torch.is_autocast_enabled('cuda')
        assert torch.get_autocast_dtype('cuda') == torch.bfloat16
    assert not torch.is_autocast_enabled('cuda')


def test_two_stage_detectors_at_their_sampler_sizes(tiny):
    for name in ('mask_rcnn', 'mask_rcnn_3x'):
        with MemoryCounter(tiny[name]) as counter:
            # the largest training image (1333x800; 3x: its largest scale), padded to 32
            assert (counter.kind, counter.batch, counter.input_hw) == \
                ('two-stage', 2, (800, 1344))
            assert counter.test_shape() == (800, 1344)
    base = count(tiny['mask_rcnn'], inference=False)['train'][0]
    more = count(tiny['mask_rcnn'], inference=False, cfg_options={
        'model.train_cfg.rcnn.sampler.num': 1024})['train'][0]
    assert more.activations > base.activations
    cascade = count(tiny['cascade'], ('fp32', 'fp16'))
    assert cascade['kind'] == 'two-stage'
    assert cascade['train'][1].activations < cascade['train'][0].activations
    assert all(t.peak > t.params for t in cascade['test'])


def test_what_it_cannot_count_is_refused(tiny):
    with pytest.raises(ValueError, match='RetinaNet is not covered'):
        MemoryCounter(tiny['retinanet'])
    with MemoryCounter(tiny['upernet'], {'optim_wrapper.paramwise_cfg': None}) as one_group:
        assert one_group.update_copy == one_group.trainable
    with pytest.raises(ValueError, match="optimiser type 'Lamb'"):
        MemoryCounter(tiny['upernet'], {'optim_wrapper.optimizer.type': 'Lamb'})
    assert optimizer_bytes(dict(type='SGD', momentum=0.9), 100) == 100
    assert optimizer_bytes(dict(type='SGD'), 100) == 0
    assert optimizer_bytes(dict(type='AdamW', amsgrad=True), 100) == 300


def test_cli(tiny, capsys):
    assert cli.main([tiny['upernet'], '--precision', 'fp32', '--with-cp', 'off', '0,1',
                     '--no-inference', '--json']) == 0
    result = json.loads(capsys.readouterr().out)
    assert [t['with_cp'] for t in result['train']] == [False, [0, 1]]
    assert result['test'] == []
    assert cli.main([tiny['upernet'], '--precision', 'bf16', '--batch', '4']) == 0
    out = capsys.readouterr().out
    assert 'training 4 x 64x64 per GPU' in out and 'inference bf16' in out
    assert cli.main([tiny['retinanet'], tiny['upernet'], '--precision', 'fp32',
                     '--no-inference']) == 1
    captured = capsys.readouterr()
    assert 'RetinaNet is not covered' in captured.err and 'segmentor' in captured.out
    with pytest.raises(SystemExit):
        cli.parse_args([tiny['upernet'], '--with-cp', 'some'])


@pytest.mark.subprocess     # (platform.processor() for meta.json runs uname)
def test_benchmark_table(tiny, tmp_path):
    bench_main(['--memory', tiny['upernet'], '--out-dir', str(tmp_path)])
    with open(tmp_path / 'memory.csv') as f:
        (row,) = list(csv.DictReader(f))
    assert 0 < float(row['train_fp16']) <= float(row['train_fp32'])
    assert row['train_fp16'] == row['train_bf16'] and float(row['test_fp32']) > 0
    assert row['input'] == '64x64' and row['kind'] == 'segmentor'
    recipes = bench.shipped_recipes()
    assert SHIPPED['upernet'] in recipes and SHIPPED['mask_rcnn_3x'] not in recipes
