"""A misspelt ``type`` is named, with the name it probably meant, before a run starts."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import NANO_DET
from mmengine.config import Config

from inline_mm.apis.config import unknown_types

ROOT = Path(__file__).resolve().parents[1]


def _problems(scope='mmdet', **cfg):
    return unknown_types(Config(cfg), scope)


def test_typos_everywhere_are_named_with_the_closest_name():
    problems = _problems(
        model=dict(type='MaskRCNN', backbone=dict(type='InLineSwinn'),
                   neck=dict(type='mmdet.FPNN'), rpn_head=dict(type='inlineswin')),
        train_dataloader=dict(dataset=dict(type='CocoDatset', pipeline=[
            dict(type='LoadImageFromFile'), dict(type='RandomChoice', transforms=[
                [dict(type='Rezise', scale=(8, 8))]])])),
        val_evaluator=[dict(type='CocoMetrc')],
        custom_hooks=[dict(type='NonFiniteCheckHok')],
        default_hooks=dict(param_scheduler=dict(type='ParamSchedulerHok')))
    assert problems == [
        "model.backbone.type='InLineSwinn' is not a registered model; did you mean 'InLineSwin'?",
        "model.neck.type='mmdet.FPNN' is not a registered model; did you mean 'mmdet.FPN'?",
        "model.rpn_head.type='inlineswin' is not a registered model; did you mean 'InLineSwin'?",
        "train_dataloader.dataset.type='CocoDatset' is not a registered dataset; "
        "did you mean 'CocoDataset'?",
        "train_dataloader.dataset.pipeline[1].transforms[0][0].type='Rezise' is not a "
        "registered transform; did you mean 'Resize'?",
        "val_evaluator[0].type='CocoMetrc' is not a registered metric; did you mean 'CocoMetric'?",
        "custom_hooks[0].type='NonFiniteCheckHok' is not a registered hook; "
        "did you mean 'NonFiniteCheckHook'?",
        "default_hooks.param_scheduler.type='ParamSchedulerHok' is not a registered hook; "
        "did you mean 'ParamSchedulerHook'?"]


def test_names_resolved_as_the_registries_resolve_them():
    assert _problems(model=dict(
        type='mmdet.MaskRCNN',                              # scoped
        backbone=dict(type='InLineSwin', init_cfg=dict(type='Pretrained')),
        rpn_head=dict(type='mmseg.FCNHead'),                # another framework's scope
        norm_cfg=dict(type='SyncBN'),                       # mmengine's root registry
        data_preprocessor=dict(type=torch.nn.Identity),     # a class, not a name
        train_cfg=dict(rpn=dict(assigner=dict(type='MaxIoUAssigner'),  # TASK_UTILS
                                sampler=dict(type='RandomSampler'))),
        test_cfg=dict(rcnn=dict(nms=dict(type='nms'))),     # an mmcv function, by name
        roi_head=dict(bbox_roi_extractor=dict(roi_layer=dict(type='RoIAlign')))),
        train_dataloader=dict(sampler=dict(type='InfiniteSampler'),
                              batch_sampler=dict(type='AspectRatioBatchSampler')),
        train_cfg=dict(type='IterBasedTrainLoop'),
        optim_wrapper=dict(type='OptimWrapper', optimizer=dict(type='AdamW')),
        param_scheduler=[dict(type='PolyLR')],
        visualizer=dict(type='DetLocalVisualizer', vis_backends=[dict(type='LocalVisBackend')])
    ) == []
    assert _problems('mmseg', model=dict(type='EncoderDecoder', backbone=dict(
        type='InLineDeiT'), decode_head=dict(type='UPerHead'))) == []


def test_unknown_scope_and_no_close_name():
    assert _problems(model=dict(type='mmfoo.Net', backbone=dict(type='Zzyzx'))) == [
        f"model{p}.type={n!r} is not a registered model; check the spelling, or that "
        "custom_imports imports the module that registers it (default_scope='mmdet')"
        for p, n in (('', 'mmfoo.Net'), ('.backbone', 'Zzyzx'))]


SHIPPED = sorted(ROOT.glob('configs/**/*.py'))


def test_no_false_alarm_on_any_shipped_config(tmp_path, monkeypatch):
    # The own-instance templates read their class names from the user's train.json.
    (tmp_path / 'annotations').mkdir()
    (tmp_path / 'annotations' / 'train.json').write_text(json.dumps(dict(
        images=[], annotations=[], categories=[dict(id=3, name='cat'), dict(id=7, name='dog')])))
    monkeypatch.setenv('INLINE_MM_DATA', str(tmp_path))
    checked = 0
    for path in SHIPPED:
        cfg = Config.fromfile(str(path))
        if cfg.get('default_scope') is None:     # a base of dataset settings, a backbone fragment
            assert '_base_' in path.parts, path
            continue
        assert unknown_types(cfg, cfg.default_scope) == [], path
        checked += 1
    assert checked >= sum('_base_' not in p.parts for p in SHIPPED)


@pytest.mark.subprocess
def test_train_stops_on_a_typo_before_anything_runs(tmp_path):
    config = tmp_path / 'typo.py'
    config.write_text(f"_base_ = {str(NANO_DET)!r}\n"
                      "model = dict(backbone=dict(type='InLineSwinn'))\n")
    work_dir = tmp_path / 'work_dir'
    out = subprocess.run(
        [sys.executable, str(ROOT / 'tools' / 'train.py'), str(config), '--work-dir',
         str(work_dir), '--cfg-options', 'val_evaluator.type=CocoMetrc'],
        capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 1, out.stderr[-2000:]
    errors = [line for line in out.stderr.splitlines() if line.startswith('error: ')]
    assert errors == [
        f"error: {config}: model.backbone.type='InLineSwinn' is not a registered model; "
        "did you mean 'InLineSwin'?",
        f"error: {config}: val_evaluator.type='CocoMetrc' is not a registered metric; "
        "did you mean 'CocoMetric'?"]
    assert not work_dir.exists()                # no runner was built, no data read
