"""End to end through the real tools (tools/train.py, tools/test.py run mmseg's scripts).

ADE20K layout: InLine-PVT Semantic FPN trains a few iterations on the toy set, saves a
checkpoint, and tools/test.py reports mIoU. Narrow backbone, 64-pixel crops, 4 iterations.
(The own-data walkthrough runs as docs/own_data.md writes it in tests/test_readme.py.)
"""
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support import subprocess_env

from inline_mm.datasets.toy import segmentation as toy

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / 'configs'

pytestmark = [pytest.mark.slow, pytest.mark.subprocess]

TINY_RUN = """
crop = (64, 64)
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations'{lza}),
    dict(type='RandomCrop', crop_size=crop, cat_max_ratio=0.75),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackSegInputs')]
test_pipeline = [dict(type='LoadImageFromFile'), dict(type='LoadAnnotations'{lza}),
                 dict(type='PackSegInputs')]
train_dataloader = dict(batch_size=2, num_workers=0, persistent_workers=False,
                        dataset=dict({root}pipeline=train_pipeline))
val_dataloader = dict(num_workers=0, persistent_workers=False,
                      dataset=dict({root}pipeline=test_pipeline))
test_dataloader = val_dataloader
param_scheduler = [dict(type='PolyLR', power=0.9, eta_min=0.0, begin=0, end=4, by_epoch=False)]
train_cfg = dict(max_iters=4, val_interval=4)
default_hooks = dict(logger=dict(interval=1), checkpoint=dict(interval=4))
"""


def _run(*args, timeout=300):
    env = subprocess_env()
    proc = subprocess.run([sys.executable, *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    return out


def _miou(log: str) -> float:
    found = re.findall(r'mIoU: ([0-9.]+)', log)
    assert found, log[-3000:]
    value = float(found[-1])
    assert 0.0 <= value <= 100.0
    return value


def test_ade20k_layout_train_checkpoint_test(tmp_path):
    data = tmp_path / 'ade'
    toy.make_ade_toy(str(data), num_train=4, num_val=2, size=64)
    cfg = tmp_path / 'fpn_pvt_tiny_toy.py'
    cfg.write_text(
        f"_base_ = '{CONFIGS}/inline_pvt/fpn_inline-pvt-t_4xb4-40k_ade20k-512x512.py'\n"
        "model = dict(\n"
        "    data_preprocessor=dict(size=(64, 64)),\n"
        "    backbone=dict(embed_dims=[16, 32, 40, 64], depths=(1, 1, 1, 1),\n"
        "                  num_heads=(1, 1, 1, 2), init_cfg=None),\n"
        "    neck=dict(in_channels=[16, 32, 40, 64], out_channels=16),\n"
        "    decode_head=dict(in_channels=[16] * 4, channels=16))\n"
        + TINY_RUN.format(lza=', reduce_zero_label=True', root=f"data_root='{data}', "))
    work = tmp_path / 'work'
    log = _run('tools/train.py', cfg, '--work-dir', work)
    assert 'Iter(train) [4/4]' in log
    assert 'SyncBatchNorm (SyncBN) layers in the model will be automatically reverted' in log
    _miou(log)                                            # validation after training
    ckpt = work / 'iter_4.pth'
    assert ckpt.is_file()
    log = _run('tools/test.py', cfg, ckpt, '--work-dir', tmp_path / 'test')
    assert 'Iter(test) [2/2]' in log
    _miou(log)
