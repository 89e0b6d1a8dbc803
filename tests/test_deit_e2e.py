"""InLine-DeiT end to end through the real tools (tools/train.py, tools/test.py run the
stock mmseg / mmdet scripts): the shipped UperNet (MultiLevelNeck) and Mask R-CNN
(SimpleFPN) configs, shrunken as every test shrinks a model (conftest.shrink_*), train a few
iterations on toy data from scratch, save a checkpoint, and the test tool reports mIoU /
box and mask mAP from it."""
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support import subprocess_env, write_tiny_config, write_toy_coco_config

from inline_mm.datasets.toy import segmentation as toy_seg
from inline_mm.datasets.toy.coco import make_coco_toy

ROOT = Path(__file__).resolve().parents[1]
DEIT = ROOT / 'configs' / 'inline_deit'
UPERNET = DEIT / 'inline-deit-t-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py'
MASK_RCNN = DEIT / 'mask-rcnn_inline-deit-t_simple-fpn_1x_coco.py'

pytestmark = [pytest.mark.slow, pytest.mark.subprocess]


def _run(*args, timeout=300):
    proc = subprocess.run([sys.executable, *map(str, args)], cwd=ROOT, env=subprocess_env(),
                          capture_output=True, text=True, timeout=timeout)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    return out


def _metric(log: str, key: str) -> float:
    found = re.findall(re.escape(key) + r': (-?[0-9.]+)', log)
    assert found, f'{key} not reported:\n{log[-3000:]}'
    return float(found[-1])


def test_upernet_train_checkpoint_test(tmp_path):
    data = tmp_path / 'ade'
    toy_seg.make_ade_toy(str(data), num_train=4, num_val=2, size=64)
    cfg = tmp_path / 'upernet_deit_toy.py'
    cfg.write_text(f"""
_base_ = {str(write_tiny_config(UPERNET, tmp_path / 'tiny_base.py'))!r}
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='RandomCrop', crop_size=(64, 64), cat_max_ratio=0.75),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackSegInputs')]
test_pipeline = [dict(type='LoadImageFromFile'),
                 dict(type='LoadAnnotations', reduce_zero_label=True),
                 dict(type='PackSegInputs')]
train_dataloader = dict(batch_size=2, num_workers=0, persistent_workers=False,
                        dataset=dict(data_root='{data}', pipeline=train_pipeline))
val_dataloader = dict(num_workers=0, persistent_workers=False,
                      dataset=dict(data_root='{data}', pipeline=test_pipeline))
test_dataloader = val_dataloader
param_scheduler = [dict(type='PolyLR', power=0.9, eta_min=0.0, begin=0, end=3, by_epoch=False)]
train_cfg = dict(max_iters=3, val_interval=3)
default_hooks = dict(logger=dict(interval=1), checkpoint=dict(interval=3))
""")
    work = tmp_path / 'work'
    log = _run('tools/train.py', cfg, '--work-dir', work)
    assert 'Iter(train) [3/3]' in log
    assert 0.0 <= _metric(log, 'mIoU') <= 100.0
    ckpt = work / 'iter_3.pth'
    assert ckpt.is_file()
    log = _run('tools/test.py', cfg, ckpt, '--work-dir', tmp_path / 'test')
    assert 'Iter(test) [2/2]' in log
    assert 0.0 <= _metric(log, 'mIoU') <= 100.0


def test_mask_rcnn_train_checkpoint_test(tmp_path):
    data = tmp_path / 'coco'
    make_coco_toy(str(data), num_train=4, num_val=2, size=64, max_objects=2, seed=1)
    cfg = write_toy_coco_config(MASK_RCNN, tmp_path, data, 64,
                                classes=('circle', 'triangle', 'rectangle'), extra='''
train_cfg = dict(max_epochs=1, val_interval=1)
default_hooks = dict(logger=dict(interval=1))
''')
    work = tmp_path / 'work'
    log = _run('tools/train.py', cfg, '--work-dir', work)
    assert re.search(r'Epoch\(train\)\s+\[1\]\[2/2\]', log), log[-3000:]
    assert -1 <= _metric(log, 'coco/bbox_mAP') <= 1          # validation after the epoch
    ckpt = work / 'epoch_1.pth'
    assert ckpt.is_file()
    log = _run('tools/test.py', cfg, ckpt, '--work-dir', tmp_path / 'test')
    for key in ('coco/bbox_mAP', 'coco/segm_mAP'):
        assert -1 <= _metric(log, key) <= 1
