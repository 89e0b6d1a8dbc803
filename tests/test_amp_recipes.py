"""Mixed precision with the stock tools, for every head: evaluation in low precision with
``tools/test.py CFG CKPT --cfg-options test_cfg.fp16=True`` (mmengine's TestLoop under
autocast: bf16 on a CPU, fp16 on CUDA), its predictions reaching the metrics in fp32 (the
patch row ``fp32_predictions``).

The configs are the shipped ones, shrunk as the other config tests shrink them
(tests/support.py) and given the toy data; a probe hook (``LowPrecisionProbe``,
tests/reliability_support.py) records in the tool's process which dtype the InLine attention
ran in and which dtypes the predictions had when the metrics received them.
"""
import json
from pathlib import Path

import pytest
import torch
from mmengine.config import Config
from mmengine.registry import DefaultScope
from mmengine.structures import InstanceData, PixelData

from reliability_support import PY, run
from support import on_toy_coco, on_toy_seg, shrink_detector, shrink_segmentor

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / 'configs'
#: what torch.autocast computes in where mmengine's loops switch it on: bf16 on a CPU
LOW = 'torch.float16' if torch.cuda.is_available() else 'torch.bfloat16'


def _toy_config(name: str, tmp: Path, coco: Path, ade: Path, probe: Path) -> Path:
    """The shipped config ``name`` shrunk, on the toy data, with the probe hook; written
    into ``tmp``."""
    cfg = Config.fromfile(str(CONFIGS / name))
    if cfg.default_scope == 'mmdet':
        cfg = on_toy_coco(shrink_detector(cfg), coco)
    else:
        cfg = on_toy_seg(shrink_segmentor(cfg), ade)
    cfg.custom_imports['imports'] = [*cfg.custom_imports['imports'], 'reliability_support']
    cfg.custom_hooks = [*cfg.get('custom_hooks', []),
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
    out = to_fp32([sample, {'x': (torch.ones(1, dtype=torch.float16),)}])
    assert out[0] is sample
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
