"""Mixed precision with the stock tools, for every head: training through
``AmpOptimWrapper`` (a shipped AMP config, or ``tools/train.py --amp``; on a CPU bf16
autocast), and evaluation in low precision with ``val_cfg.fp16=True`` and ``tools/test.py
CFG CKPT --cfg-options test_cfg.fp16=True`` (mmengine's loops under autocast: bf16 on a CPU,
fp16 on CUDA), the predictions reaching the metrics in fp32 (the patch row
``fp32_predictions``). Mask R-CNN and UperNet train from their AMP configs in
tests/test_reliability_amp.py; mmcv's ops in low precision: tests/test_mmcv_fallback.py.

The configs are the shipped ones, shrunk as the other config tests shrink them
(tests/support.py) and given the toy data; a probe hook (``LowPrecisionProbe``,
tests/reliability_support.py) records in the tool's process which dtype the InLine attention
ran in and which dtypes the predictions had when the metrics received them.
"""
import json
import math
from pathlib import Path

import pytest
import torch
from mmengine.config import Config
from mmengine.registry import DefaultScope
from mmengine.structures import InstanceData, PixelData

from reliability_support import PY, run, scalars
from support import on_toy_coco, on_toy_seg, shrink_detector, shrink_segmentor

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / 'configs'
#: what torch.autocast computes in where mmengine's loops switch it on: bf16 on a CPU
LOW = 'torch.float16' if torch.cuda.is_available() else 'torch.bfloat16'


def _instances_for_panoptic(cfg, data: Path):
    """The panoptic Mask2Former on the toy COCO instances: its data pipeline and metric read
    COCO's panoptic PNGs with panopticapi (GitHub only, not installed here), so it trains on
    the instance masks (things; mmdet's Mask2Former takes them without a semantic map) and is
    evaluated on its instance predictions with its second metric, CocoMetric."""
    for split in ('train', 'val'):
        dataset = cfg[f'{split}_dataloader'].dataset
        dataset.update(type='CocoDataset', ann_file=f'annotations/instances_{split}2017.json',
                       data_prefix=dict(img=f'{split}2017/'))
    cfg.val_evaluator = next(e for e in cfg.val_evaluator if e.type == 'CocoMetric')
    return cfg


def _toy_config(name: str, tmp: Path, coco: Path, ade: Path, probe: Path,
                iters: int = 1) -> Path:
    """The shipped config ``name`` shrunk, on the toy data, training ``iters`` iterations
    and validating at their end, with NonFiniteCheckHook and the probe hook; written into
    ``tmp``."""
    cfg = Config.fromfile(str(CONFIGS / name))
    if 'panoptic' in name:
        cfg = _instances_for_panoptic(cfg, coco)
    if cfg.default_scope == 'mmdet':
        cfg = on_toy_coco(shrink_detector(cfg), coco)
    else:
        cfg = on_toy_seg(shrink_segmentor(cfg), ade)
    cfg.train_cfg.update(max_iters=iters, val_interval=iters)
    cfg.default_hooks.checkpoint.interval = iters
    cfg.custom_imports['imports'] = [*cfg.custom_imports['imports'], 'reliability_support']
    cfg.custom_hooks = [*cfg.get('custom_hooks', []), dict(type='NonFiniteCheckHook'),
                        dict(type='LowPrecisionProbe', out=str(probe), amp_on_cpu=True)]
    path = tmp / Path(name).name
    cfg.dump(str(path))
    return path


def _random_checkpoint(config: Path, path: Path) -> Path:
    """A checkpoint of the config's model with its initial weights."""
    cfg = Config.fromfile(str(config))
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        registry = __import__(f'{cfg.default_scope}.registry', fromlist=['MODELS']).MODELS
        model = registry.build(cfg.model)
    torch.save({'state_dict': model.state_dict(), 'meta': {}}, path)
    return path


def _test_tool(config: Path, checkpoint: Path, work_dir: Path, log: Path, probe: Path) -> dict:
    """``tools/test.py`` in low precision; returns the probe's record."""
    run([PY, str(ROOT / 'tools/test.py'), str(config), str(checkpoint), '--work-dir',
         str(work_dir), '--cfg-options', 'test_cfg.fp16=True'], log)
    assert 'Iter(test) [2/2]' in log.read_text()
    return json.loads(probe.read_text())


# ------------------------------------------------------------------ the conversion
def test_predictions_are_converted_to_fp32_in_place_and_nothing_else():
    from mmdet.structures import DetDataSample

    from inline_mm.patches.predictions import to_fp32
    sample = DetDataSample()
    sample.pred_instances = InstanceData(bboxes=torch.rand(3, 4, dtype=torch.bfloat16),
                                         scores=torch.rand(3, dtype=torch.float16),
                                         labels=torch.arange(3), masks=torch.ones(3, 5, 5) > 0)
    sample.seg_logits = PixelData(data=torch.rand(2, 5, 5, dtype=torch.bfloat16))
    sample.gt_instances = InstanceData(bboxes=torch.rand(1, 4, dtype=torch.float64))
    bboxes = sample.pred_instances.bboxes
    from collections import OrderedDict
    ordered = OrderedDict(y=torch.ones(1, dtype=torch.bfloat16))
    out = to_fp32([sample, {'x': (torch.ones(1, dtype=torch.float16),)}, ordered])
    assert out[0] is sample and out[2] is ordered and ordered['y'].dtype == torch.float32
    pred = sample.pred_instances
    assert (pred.bboxes.dtype, pred.scores.dtype) == (torch.float32, torch.float32)
    assert torch.equal(pred.bboxes, bboxes.float())
    assert (pred.labels.dtype, pred.masks.dtype) == (torch.int64, torch.bool)
    assert sample.seg_logits.data.dtype == torch.float32
    assert sample.gt_instances.bboxes.dtype == torch.float64
    assert out[1]['x'][0].dtype == torch.float32
    fp32 = torch.ones(2)
    assert to_fp32(fp32) is fp32


def test_the_engine_switches_the_conversion_on():
    from mmengine.model import BaseModel

    import inline_mm.engine
    from inline_mm.patches import find
    inline_mm.engine.install()
    row = find('fp32_predictions')
    assert row.needed()[0] and row.active()

    class Model(BaseModel):
        def forward(self, inputs, data_samples=None, mode='tensor'):
            return [InstanceData(scores=torch.nn.functional.linear(inputs, torch.ones(2, 2)))]

    model = Model()
    with torch.autocast('cpu', dtype=torch.bfloat16):
        for step in (model.val_step, model.test_step):
            assert step({'inputs': torch.ones(3, 2)})[0].scores.dtype == torch.float32


# ------------------------------------------------------------------ the stock test tool
@pytest.mark.slow
@pytest.mark.subprocess
def test_mask_rcnn_evaluates_in_low_precision_with_the_test_tool(tiny_coco, tiny_ade, tmp_path):
    """The failure the issue reports: mmdet's CocoMetric.process took bf16 boxes
    (``TypeError: Got unsupported ScalarType BFloat16``)."""
    probe = tmp_path / 'probe.json'
    config = _toy_config('inline_swin/mask-rcnn_inline-swin-t_fpn_1x_coco.py', tmp_path,
                         tiny_coco, tiny_ade, probe)
    checkpoint = _random_checkpoint(config, tmp_path / 'init.pth')
    seen = _test_tool(config, checkpoint, tmp_path / 'test', tmp_path / 'test.log', probe)
    assert seen['eval'] == [LOW]
    assert seen['predictions'] == ['torch.float32']


# ------------------------------------------------------------------ every AMP recipe family
#: the families with a shipped AMP config (Mask R-CNN and UperNet train in
#: test_reliability_amp.py and evaluate above)
SHIPPED_AMP = ['inline_pvt/cascade-mask-rcnn_inline-pvt-t_fpn_amp-1x_coco.py',
               'inline_pvt/fpn_inline-pvt-t_4xb4-amp-bf16-40k_ade20k-512x512.py']
#: the heads that ship no AMP config: their fp32 config with ``tools/train.py --amp``
AMP_FLAG = ['inline_swin/retinanet_inline-swin-t_fpn_1x_coco.py',
            'inline_swin/fcos_inline-swin-t_fpn_gn-head_1x_coco.py',
            'inline_swin/dino-4scale_inline-swin-t_8xb2-12e_coco.py',
            'inline_swin/mask2former_inline-swin-t_8xb2-lsj-50e_coco.py',
            'inline_swin/mask2former_inline-swin-t_8xb2-lsj-50e_coco-panoptic.py',
            'inline_swin/mask2former_inline-swin-t_8xb2-160k_ade20k-512x512.py',
            'inline_swin/segformer_inline-swin-t_8xb2-160k_ade20k-512x512.py']
ITERS = 4


def _losses(work_dir: Path) -> dict:
    """Every loss logged at each training iteration."""
    return {it: {k: v for k, v in rec.items() if k.startswith('loss')}
            for it, rec in scalars(work_dir).items()}


@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.parametrize('name', SHIPPED_AMP + AMP_FLAG, ids=[
    'cascade-mask-rcnn', 'semantic-fpn', 'retinanet', 'fcos', 'dino', 'mask2former-instance',
    'mask2former-panoptic', 'mask2former-semantic', 'segformer'])
def test_amp_recipe_trains_and_evaluates_in_low_precision(name, tiny_coco, tiny_ade, tmp_path):
    """4 iterations through ``AmpOptimWrapper`` (a shipped AMP config, or the fp32 config
    with ``--amp``; on a CPU bf16 autocast, the wrapper's CUDA check lifted) validating in
    low precision at the end (``val_cfg.fp16=True``), then ``tools/test.py`` on the
    checkpoint with ``test_cfg.fp16=True``: every loss finite (NonFiniteCheckHook on too),
    the backbone's weights updated, the InLine attention run in the low dtype, the
    predictions handed to the metrics in fp32."""
    probe = tmp_path / 'probe.json'
    config = _toy_config(name, tmp_path, tiny_coco, tiny_ade, probe, iters=ITERS)
    train = tmp_path / 'train'
    amp = ['--amp'] if name in AMP_FLAG else []
    run([PY, str(ROOT / 'tools/train.py'), str(config), '--work-dir', str(train), *amp,
         '--cfg-options', 'val_cfg.fp16=True'], tmp_path / 'train.log')
    seen = json.loads(probe.read_text())
    assert seen['optim_wrapper'] == 'AmpOptimWrapper'
    assert seen['train'] == [LOW] and seen['eval'] == [LOW]
    assert seen['predictions'] == ['torch.float32']
    assert seen['backbone_changed']
    losses = _losses(train)
    assert sorted(losses) == list(range(1, ITERS + 1))
    assert all(rec and all(math.isfinite(v) for v in rec.values()) for rec in losses.values())

    probe.unlink()
    seen = _test_tool(config, train / f'iter_{ITERS}.pth', tmp_path / 'test',
                      tmp_path / 'test.log', probe)
    assert seen['eval'] == [LOW] and seen['predictions'] == ['torch.float32']


def test_the_fallback_benchmark_finds_what_it_measures(capsys):
    """``python -m benchmarks.amp_fallbacks`` (its figures are in the issue's note) at a toy
    size: the functions it times are reached and the predict ran in bf16 autocast."""
    from benchmarks import amp_fallbacks
    shares = amp_fallbacks.main(['--size', '64', '96', '--rounds', '1'])
    assert 0 < shares['widening'] < shares['RoIAlign'] < 1
    assert 0 < shares['to fp32'] < 1 and 0 < shares['NMS'] < 1
    assert 0 < shares['RPN in fp32'] < 1
    assert 'predict, bf16 autocast, 64x96' in capsys.readouterr().out
