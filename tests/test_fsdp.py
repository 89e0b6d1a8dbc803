"""Fully sharded data parallel through mmengine (FlexibleRunner + FSDPStrategy).

The shipped FSDP child (InLine-Swin-B UperNet, Cityscapes), shrunk, trains 2 iterations in 2
gloo processes on the CPU through ``tools/dist_train.sh`` -> ``tools/train.py`` from the same
start (``load_from``) as its DDP parent; the checkpoints hold the same weights under the same
keys, and ``tools/test.py`` reads the FSDP one and scores what the DDP run validated. The wrap
policy's units are checked on the shipped models directly (no process group needed).
"""
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from mmengine.config import Config
from mmengine.registry import FUNCTIONS, init_default_scope

from reliability_support import load_checkpoint, max_state_diff
from support import (free_port, on_toy_seg, shrink_detector, shrink_segmentor,
                     subprocess_env)

from inline_mm.engine.fsdp import fsdp_units, inline_auto_wrap_policy

ROOT = Path(__file__).resolve().parents[1]
SWIN = ROOT / 'configs' / 'inline_swin'
SEG_FSDP = SWIN / 'inline-swin-b-in1k-pre_upernet_4xb2-fsdp-80k_cityscapes-512x1024.py'
DET_FSDP = SWIN / 'cascade-mask-rcnn_inline-swin-b_fpn_fsdp-1x_coco.py'
PY = sys.executable


@pytest.mark.parametrize('path', [SEG_FSDP, DET_FSDP], ids=['upernet', 'cascade'])
def test_fsdp_children_are_their_parents_under_fsdp(path):
    child = Config.fromfile(str(path)).to_dict()
    parent = Config.fromfile(str(path).replace('fsdp-', '')).to_dict()
    assert child.pop('runner_type') == 'FlexibleRunner'
    strategy = child.pop('strategy')
    assert strategy == dict(type='FSDPStrategy', state_dict_cfg='full', model_wrapper=dict(
        auto_wrap_policy=dict(type='inline_auto_wrap_policy'), use_orig_params=True))
    assert child == parent
    # mmengine's wrapper looks the policy up by name
    assert FUNCTIONS.get('inline_auto_wrap_policy') is inline_auto_wrap_policy


def _build(path, scope, shrink=None, **backbone):
    cfg = Config.fromfile(str(path))
    if shrink:
        shrink(cfg)
    cfg.model.backbone.update(init_cfg=None, **backbone)
    init_default_scope(scope)
    registry = __import__(f'{scope}.registry', fromlist=['MODELS']).MODELS
    return registry.build(cfg.model)


def test_wrap_policy_units():
    """A unit per block (24 in Swin-B), the frozen stem and stage as units of their own and
    nothing inside any of them, the large heads by size, and the rest in the root."""
    model = _build(SEG_FSDP, 'mmseg', frozen_stages=1)
    units = fsdp_units(model)
    blocks = [name for name in units if re.fullmatch(r'backbone\.layers\.\d+\.blocks\.\d+', name)]
    assert len(blocks) == sum(model.backbone.depths) - 2      # stage 0's two are frozen ...
    assert {'backbone.patch_embed', 'backbone.layers.0'} <= set(units)   # ... in one unit
    modules = dict(model.named_modules())
    assert all(not p.requires_grad for p in modules['backbone.layers.0'].parameters())
    assert all(p.requires_grad for p in modules['backbone.layers.1'].parameters())
    for outer in blocks + ['backbone.patch_embed', 'backbone.layers.0']:
        assert not [name for name in units if name.startswith(outer + '.')], outer
    assert 'decode_head' in units and units[''] < 5_000_000
    # a smaller bound makes more units outside the blocks; the blocks stay as they are
    finer = fsdp_units(model, min_num_params=1_000_000)
    assert set(blocks) <= set(finer) and len(finer) > len(units)
    # a (shrunk) detector: its 5 blocks (1, 1, 2 in the mixed stage, 1), heads too small
    det = fsdp_units(_build(DET_FSDP, 'mmdet', shrink=shrink_detector))
    assert sorted(det) == [''] + sorted(n for n in det if '.blocks.' in n)
    assert len(det) == 6


# ------------------------------------------------------------------ 2 gloo processes
#: deterministic training: no random augmentation, dropout or stochastic depth, so that
#: the FSDP and the DDP run see the same numbers
DETERMINISTIC = dict(type='Resize', scale=(128, 64), keep_ratio=False)


def _toy_config(path: Path, data: Path, init: Path, out: Path) -> Path:
    cfg = on_toy_seg(shrink_segmentor(Config.fromfile(str(path))), data)
    cfg.train_dataloader.dataset.pipeline = [
        dict(type='LoadImageFromFile'), dict(type='LoadAnnotations'), DETERMINISTIC,
        dict(type='PackSegInputs')]
    cfg.train_dataloader.sampler = dict(type='InfiniteSampler', shuffle=False)
    cfg.model.backbone.drop_path_rate = 0.
    cfg.model.decode_head.dropout_ratio = cfg.model.auxiliary_head.dropout_ratio = 0.
    cfg.train_cfg = dict(type='IterBasedTrainLoop', max_iters=2, val_interval=2)
    cfg.default_hooks.checkpoint = dict(type='CheckpointHook', by_epoch=False, interval=2)
    cfg.load_from = str(init)
    cfg.dump(str(out))
    return out


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
    """The FSDP child and its DDP parent, trained 2 iterations each in 2 processes from the
    same weights."""
    from inline_mm.datasets.toy.segmentation import make_cityscapes_toy
    from mmseg.registry import MODELS
    tmp = tmp_path_factory.mktemp('fsdp')
    data = tmp / 'cityscapes'
    make_cityscapes_toy(str(data), num_train=4, num_val=2, size=64)
    configs = {}
    init = tmp / 'init.pth'
    for kind, path in (('fsdp', SEG_FSDP), ('ddp', Path(str(SEG_FSDP).replace('fsdp-', '')))):
        configs[kind] = _toy_config(path, data, init, tmp / f'{kind}.py')
    init_default_scope('mmseg')
    torch.manual_seed(0)
    model = MODELS.build(Config.fromfile(str(configs['ddp'])).model)
    model.init_weights()
    torch.save({'state_dict': model.state_dict(), 'meta': {}}, init)
    logs = {}
    for kind, config in configs.items():
        work = tmp / f'work_{kind}'
        cmd = ['env', f'PORT={free_port()}', f'PYTHON={PY}', 'bash',
               str(ROOT / 'tools/dist_train.sh'), str(config), '2', '--work-dir', str(work)]
        proc = subprocess.run(cmd, cwd=ROOT, env=subprocess_env(), capture_output=True,
                              text=True, timeout=300)
        logs[kind] = proc.stdout + proc.stderr
        assert proc.returncode == 0, logs[kind][-6000:]
    return dict(tmp=tmp, configs=configs, init=init, logs=logs)


@pytest.mark.slow
@pytest.mark.subprocess
def test_fsdp_trains_like_ddp_on_two_cpu_processes(runs):
    assert 'fully sharded on CPU processes' in runs['logs']['fsdp']
    assert 'fully sharded' not in runs['logs']['ddp']
    fsdp = load_checkpoint(runs['tmp'] / 'work_fsdp' / 'iter_2.pth')
    ddp = load_checkpoint(runs['tmp'] / 'work_ddp' / 'iter_2.pth')
    init = load_checkpoint(runs['init'])['state_dict']
    # a whole checkpoint, keyed as the DDP run's (what load_from, tools/test.py and the ONNX
    # export read), with the weights the DDP run reached
    assert {k: v.shape for k, v in fsdp['state_dict'].items()} == \
        {k: v.shape for k, v in ddp['state_dict'].items()}
    assert max_state_diff(fsdp['state_dict'], ddp['state_dict']) < 1e-5
    assert max_state_diff(ddp['state_dict'], init) > 1e-3         # (2 steps moved them)
    assert fsdp['meta']['iter'] == 2


def _metrics(log: str) -> dict:
    found = re.findall(r'aAcc: ([0-9.]+)\s+mIoU: ([0-9.]+)\s+mAcc: ([0-9.]+)', log)
    assert found, log[-3000:]
    return dict(zip(('aAcc', 'mIoU', 'mAcc'), map(float, found[-1])))


@pytest.mark.slow
@pytest.mark.subprocess
def test_fsdp_checkpoint_tests_as_the_ddp_run_validates(runs):
    """tools/test.py (one process) reads the FSDP checkpoint with the FSDP config itself and
    scores the toy val split as the DDP run (and the FSDP run) validated it at the end."""
    cmd = [PY, str(ROOT / 'tools/test.py'), str(runs['configs']['fsdp']),
           str(runs['tmp'] / 'work_fsdp' / 'iter_2.pth'), '--work-dir', str(runs['tmp'] / 'test')]
    proc = subprocess.run(cmd, cwd=ROOT, env=subprocess_env(), capture_output=True, text=True,
                          timeout=300)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-6000:]
    assert 'Load checkpoint from' in log
    ddp = _metrics(runs['logs']['ddp'])
    assert _metrics(runs['logs']['fsdp']) == ddp
    assert _metrics(log) == ddp
