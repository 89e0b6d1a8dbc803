"""End to end through the real tools (tools/train.py, tools/test.py run mmseg's scripts).

ADE20K layout: InLine-PVT Semantic FPN trains a few iterations on the toy set, saves a
checkpoint, and tools/test.py reports mIoU. Own data: the README walkthrough on a 0/255
binary folder set -- check fails, convert_masks fixes it, check passes, the template
(edited only in its data block) trains and evaluates, the predict config writes palette
PNG masks. Narrow backbones, 64-pixel crops, 4 iterations.
"""
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from inline_mm.toydata import segmentation as toy

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / 'configs'
TEMPLATE = CONFIGS / 'custom' / 'inline-swin-t-in1k-pre_upernet_1xb4-20k_custom-512x512.py'
PREDICT = TEMPLATE.with_name(TEMPLATE.stem + '_predict.py')

pytestmark = pytest.mark.slow

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


def _tool(name):
    spec = importlib.util.spec_from_file_location(f'_tool_{name}', ROOT / 'tools' / f'{name}.py')
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(*args, timeout=300):
    env = dict(os.environ, OMP_NUM_THREADS='1', MKL_NUM_THREADS='1')
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


def test_own_data_walkthrough(tmp_path, capsys):
    check, convert = _tool('check_dataset'), _tool('convert_masks')
    toy.make_broken_variants(str(tmp_path / 'raw'), size=64)
    data = tmp_path / 'raw' / 'binary_255'            # "object" masks exported as 0/255
    assert check.main([str(data)]) == 1
    assert '[binary-0-255]' in capsys.readouterr().out
    os.rename(data / 'masks', data / 'masks_0_255')
    assert convert.main([str(data / 'masks_0_255'), str(data / 'masks'),
                         '--meta', str(data / 'meta.json')]) == 0

    # A user's copy of the template: only the data block is edited.
    classes = tuple(json.loads((data / 'meta.json').read_text())['classes'])
    text = TEMPLATE.read_text()
    text, n_root = re.subn(r"^data_root = .*$", f"data_root = '{data}'", text, flags=re.M)
    text, n_cls = re.subn(r"^classes = .*$", f'classes = {classes!r}', text, flags=re.M)
    assert n_root == n_cls == 1
    mine = tmp_path / 'my_config.py'
    mine.write_text(text)
    capsys.readouterr()
    assert check.main(['--config', str(mine)]) == 0, capsys.readouterr().out
    assert 'OK: train, val look fine for 2 classes' in capsys.readouterr().out

    tiny = tmp_path / 'tiny.py'
    tiny.write_text(
        "_base_ = './my_config.py'\n"
        "model = dict(\n"
        "    data_preprocessor=dict(size=(64, 64)),\n"
        "    backbone=dict(embed_dims=16, depths=(1, 1, 1, 1), num_heads=(1, 1, 2, 2),\n"
        "                  init_cfg=None),\n"
        "    decode_head=dict(in_channels=[16, 32, 64, 128], channels=16),\n"
        "    auxiliary_head=dict(in_channels=64, channels=8))\n"
        + TINY_RUN.format(lza='', root=''))
    work = tmp_path / 'work'
    log = _run('tools/train.py', tiny, '--work-dir', work)
    _miou(log)
    assert re.search(r'\|\s+object\s+\|', log), 'per-class table lacks the user class'
    assert list(work.glob('best_mIoU_iter_4.pth'))

    predict = tmp_path / 'predict.py'
    predict.write_text(PREDICT.read_text().replace(f"'./{TEMPLATE.name}'", "'./tiny.py'"))
    out_dir = tmp_path / 'predictions'
    log = _run('tools/test.py', predict, work / 'iter_4.pth', '--out', out_dir,
               '--work-dir', tmp_path / 'test',
               '--cfg-options', 'test_dataloader.dataset.data_prefix.img_path=images/val')
    assert f'2 predicted masks saved to {out_dir}' in log
    for img in (data / 'images' / 'val').iterdir():
        pred = Image.open(out_dir / f'{img.stem}.png')
        assert pred.mode == 'P' and pred.size == Image.open(img).size
        assert set(np.unique(np.array(pred))) <= {0, 1}
        assert pred.getpalette()[:6] == [0, 0, 0, 255, 255, 255]      # from meta.json
