"""The model-zoo configs that no other tools test trains (Cascade Mask R-CNN, InLine-CSwin
Mask R-CNN and UperNet) through the real tools on toy data: for each distinct model one
training iteration with ``tools/train.py`` (which validates at its end) and one evaluation
of the checkpoint it wrote with ``tools/test.py``.

Each config is shrunk as the other config tests shrink it (conftest) and given the toy data;
configs whose shrunken models are built alike (AMP and 3x children, variants that differ
only in depth or drop path) run once.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from mmengine.config import Config

from support import on_toy_coco, on_toy_seg, shrink_detector, shrink_segmentor
from inline_mm.models import FAMILIES

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / 'configs'
TIMEOUT = 300

pytestmark = pytest.mark.slow

#: the configs of this test: those that define a model (no AMP or 3x child)
ZOO = sorted([*CONFIGS.glob('inline_*/cascade-mask-rcnn_*_1x_coco.py'),
              *CONFIGS.glob('inline_cswin/mask-rcnn_*_fpn_1x_coco.py'),
              *CONFIGS.glob('inline_cswin/*_upernet_8xb2-160k_ade20k-512x512.py')])


def _shrunk(path: Path) -> Config:
    cfg = Config.fromfile(str(path))
    return shrink_detector(cfg) if cfg.default_scope == 'mmdet' else shrink_segmentor(cfg)


def _structure(path: Path) -> str:
    """What the shrunken model is, whatever the config calls it: the backbone as built
    (on the meta device, without drop path) and the rest of the model's config."""
    model = _shrunk(path).model
    backbone = model.pop('backbone')
    args = {k: v for k, v in backbone.items() if k not in ('type', 'init_cfg')}
    args['drop_path_rate'] = 0.
    with torch.device('meta'):
        built = FAMILIES[backbone.type].cls(**args)
    return repr(built) + repr(model.to_dict())


def _distinct(paths):
    seen, kept = set(), []
    for path in paths:
        key = _structure(path)
        if key not in seen:
            seen.add(key)
            kept.append(path)
    return kept


DISTINCT = _distinct(ZOO)


def test_every_detector_and_segmentor_pairing_is_run():
    names = [p.name for p in DISTINCT]
    for prefix in ('cascade-mask-rcnn_inline-swin', 'cascade-mask-rcnn_inline-pvt',
                   'mask-rcnn_inline-cswin', 'inline-cswin'):
        assert any(n.startswith(prefix) for n in names), (prefix, names)
    # InLine-Swin-T, -S and -B differ in their stage layouts, so each is a model of its own
    assert sum(n.startswith('cascade-mask-rcnn_inline-swin') for n in names) == 3


def _run(*args) -> str:
    env = dict(os.environ, OMP_NUM_THREADS='1', MKL_NUM_THREADS='1', PYTHONUNBUFFERED='1')
    env['PYTHONPATH'] = str(ROOT) + os.pathsep + env.get('PYTHONPATH', '')
    proc = subprocess.run([sys.executable, *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    return out


def _metrics(log: str, keys) -> dict:
    found = {}
    for key in keys:
        values = re.findall(re.escape(key) + r': (-?[\d.]+)', log)
        assert values, f'{key} not reported:\n{log[-2000:]}'
        found[key] = float(values[-1])
    return found


@pytest.mark.subprocess
@pytest.mark.parametrize('path', DISTINCT, ids=[p.name for p in DISTINCT])
def test_trains_a_step_and_evaluates_through_the_tools(path, tiny_coco, tiny_ade, tmp_path):
    cfg = _shrunk(path)
    detection = cfg.default_scope == 'mmdet'
    cfg = on_toy_coco(cfg, tiny_coco) if detection else on_toy_seg(cfg, tiny_ade)
    config = tmp_path / path.name
    cfg.dump(str(config))
    keys = ('coco/bbox_mAP', 'coco/segm_mAP') if detection else ('mIoU',)

    log = _run('tools/train.py', config, '--work-dir', tmp_path / 'train')
    assert 'Iter(train) [1/1]' in log
    for value in _metrics(log, keys).values():              # validation after training
        assert -1 <= value <= 100
    checkpoint = tmp_path / 'train' / 'iter_1.pth'
    assert checkpoint.is_file()

    log = _run('tools/test.py', config, checkpoint, '--work-dir', tmp_path / 'test')
    assert 'Iter(test) [2/2]' in log
    for value in _metrics(log, keys).values():
        assert -1 <= value <= 100
