"""The heads beyond Mask R-CNN and UperNet / Semantic FPN: RetinaNet, FCOS, DINO and
Mask2Former (mmdet), Mask2Former and SegFormer (mmseg).

Every such config follows its recipe (backbone, widths, the parameter groups its optimiser
builds), trains one iteration on toy data through mmengine's Runner with validation at its
end, and on CPU reaches exactly the ``mmcv._ext`` functions docs/get_started.md lists for it.
The stock inferencers run each in tests/test_inferencers.py. The panoptic Mask2Former
builds, trains a step and predicts; its data pipeline needs panopticapi (GitHub only), and
says so.
"""
import copy
import functools
import re
from pathlib import Path

import pytest
import torch
from mmengine.config import Config
from mmengine.optim import build_optim_wrapper
from mmengine.registry import DefaultScope
from mmengine.runner import Runner

import _inline_mm_mmcv_hook
import config_spec as spec
from conftest import CUSTOM_IMPORTS
from support import on_toy_coco, on_toy_seg, out_channels, shrink_detector, shrink_segmentor

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / 'configs'

#: config -> (backbone arch, backbone learning-rate factor, the mmcv._ext functions that one
#: training iteration with validation calls on CPU: docs/get_started.md, "mmcv without
#: compiling"; on CUDA the focal loss and the deformable attention add theirs)
HEADS = {
    'inline_swin/retinanet_inline-swin-t_fpn_1x_coco.py': ('tiny', 1., {'nms'}),
    'inline_pvt/retinanet_inline-pvt-s_fpn_1x_coco.py': ('small', 1., {'nms'}),
    'inline_swin/fcos_inline-swin-t_fpn_gn-head_1x_coco.py': ('tiny', 1., {'nms'}),
    'inline_swin/dino-4scale_inline-swin-t_8xb2-12e_coco.py': ('tiny', .1, set()),
    'inline_swin/mask2former_inline-swin-t_8xb2-lsj-50e_coco.py': ('tiny', .1, set()),
    'inline_swin/mask2former_inline-swin-t_8xb2-160k_ade20k-512x512.py': ('tiny', .1, set()),
    'inline_swin/segformer_inline-swin-t_8xb2-160k_ade20k-512x512.py': ('tiny', 1., set()),
    'inline_pvt/segformer_inline-pvt-s_8xb2-160k_ade20k-512x512.py': ('small', 1., set()),
}
PANOPTIC = 'inline_swin/mask2former_inline-swin-t_8xb2-lsj-50e_coco-panoptic.py'
PREFIXES = ('retinanet_', 'fcos_', 'dino-', 'mask2former_', 'segformer_')


@functools.lru_cache(maxsize=None)
def _parse(name: str) -> Config:
    return Config.fromfile(str(CONFIGS / name))


def _load(name: str) -> Config:
    return copy.deepcopy(_parse(name))


def _shrink(cfg: Config) -> Config:
    return shrink_detector(cfg) if cfg.default_scope == 'mmdet' else shrink_segmentor(cfg)


def _shrunk(name: str) -> Config:
    return _shrink(_load(name))


def _build(cfg: Config):
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        registry = __import__(f'{cfg.default_scope}.registry', fromlist=['MODELS']).MODELS
        return registry.build(cfg.model)


def test_every_config_of_these_heads_is_here():
    shipped = {str(p.relative_to(CONFIGS)) for p in CONFIGS.glob('inline_*/*.py')
               if p.name.startswith(PREFIXES)}
    assert shipped == set(HEADS) | {PANOPTIC}


def _head_inputs(model) -> list:
    """The input widths of what reads the backbone: neck, pixel decoder or decode head."""
    if model.get('neck'):
        return model.neck.in_channels
    return (model.get('panoptic_head') or model.decode_head).in_channels


@pytest.mark.parametrize('name', sorted(HEADS) + [PANOPTIC])
def test_recipe(name):
    """Backbone and file as the name says; what reads it takes every output it makes (an
    output nothing reads would leave its norm without gradients: DDP stops there); the
    imports; the learning rates and decay of the parameter groups the optimiser builds."""
    cfg = _load(name)
    arch, backbone_lr, _ = HEADS.get(name, ('tiny', .1, None))
    variant = re.search(r'inline-(\w+-\w)[_-]', name).group(1)
    bb = cfg.model.backbone
    head = re.match(r'[a-z0-9]+', Path(name).name)[0]
    rate = spec.DROP_PATH[head, spec.schedule(name)][variant].value
    assert (bb.type, bb.arch, bb.drop_path_rate) == (*spec.BACKBONES[variant], rate)
    spared = True                           # the backbone's norms and position tables
    if head in ('retinanet', 'fcos'):       # the one-stage recipe of tests/config_spec.py
        recipe = spec.ONE_STAGE[variant.split('-')[0]]
        spec.check_coco(cfg, spec.values(recipe), bb.type)
        spared = bool(spec.no_decay_keys(recipe, bb.type))
    assert bb.init_cfg.checkpoint == f"inline://{variant.replace('-', '_')}"
    assert _head_inputs(cfg.model) == out_channels(bb)
    if cfg.model.get('neck', {}).get('type') == 'FPN':     # RetinaNet, FCOS: P3-P7
        assert bb.out_indices == (1, 2, 3) and cfg.model.neck.start_level == 0
    imports = cfg.custom_imports['imports']
    assert imports[-2:] == CUSTOM_IMPORTS['imports']
    assert imports[:-2] == (['mmdet.models'] if cfg.default_scope == 'mmseg'
                            and 'mask2former' in name else [])

    cfg = _shrink(cfg)
    model = _build(cfg)
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        optim = build_optim_wrapper(model, cfg.optim_wrapper)
    base = cfg.optim_wrapper.optimizer
    groups = {id(p): g for g in optim.optimizer.param_groups for p in g['params']}
    no_decay = model.backbone.no_weight_decay() if spared else set()
    for pname, p in model.backbone.named_parameters():
        g = groups[id(p)]
        assert g['lr'] == pytest.approx(base.lr * backbone_lr), pname
        exempt = pname in no_decay
        assert g['weight_decay'] == (0. if exempt else base.weight_decay), pname
    head = model.decode_head if cfg.default_scope == 'mmseg' else (
        getattr(model, 'bbox_head', None) or model.panoptic_head)
    weight = next(p for n, p in head.named_parameters() if n.endswith('weight')
                  and p.dim() > 1)
    head_lr = 10. if 'segformer' in name else 1.    # SegFormer's all-MLP head at 10x
    assert groups[id(weight)]['lr'] == pytest.approx(base.lr * head_lr)


@pytest.mark.parametrize('name', sorted(HEADS))
def test_trains_one_iteration_and_validates_on_toy_data(name, tiny_coco, tiny_ade, tmp_path,
                                                        monkeypatch):
    cfg = _shrunk(name)
    detection = cfg.default_scope == 'mmdet'
    cfg = on_toy_coco(cfg, tiny_coco) if detection else on_toy_seg(cfg, tiny_ade)
    cfg.work_dir = str(tmp_path)
    calls = tmp_path / 'mmcv_ext_calls.txt'
    monkeypatch.setenv('INLINE_MM_RECORD_OPS', str(calls))
    runner = Runner.from_cfg(cfg)
    before = [p.detach().clone() for p in runner.model.backbone.parameters()]
    runner.train()
    metrics = {k[len("val/"):]: v.current() for k, v in runner.message_hub.log_scalars.items()
               if k.startswith("val/")}
    assert runner.iter == 1 and (tmp_path / 'iter_1.pth').is_file()
    assert any(not torch.equal(a, b) for a, b in zip(before, runner.model.backbone.parameters()))
    keys = ['coco/bbox_mAP'] + (['coco/segm_mAP'] if 'mask2former' in name else []) \
        if detection else ['mIoU']
    for key in keys:
        assert -1 <= metrics[key] <= 100, metrics
    if _inline_mm_mmcv_hook.backend() == 'fallback':
        called = set(calls.read_text().split()) if calls.exists() else set()
        assert called == HEADS[name][2]


def test_panoptic_builds_trains_and_predicts_and_names_panopticapi_for_its_data():
    from mmdet.testing import demo_mm_inputs
    cfg = _shrunk(PANOPTIC)
    model = _build(cfg)
    batch = demo_mm_inputs(batch_size=2, image_shapes=[(3, 96, 128), (3, 80, 112)],
                           num_items=[3, 2], num_classes=80, with_mask=True,
                           with_semantic=True)
    data = dict(inputs=list(batch['inputs']), data_samples=batch['data_samples'])
    model.train()
    with DefaultScope.overwrite_default_scope('mmdet'):
        optim = build_optim_wrapper(model, cfg.optim_wrapper)
    log = model.train_step(data, optim)
    assert torch.isfinite(log['loss']) and 'loss_mask' in log
    model.eval()
    with torch.no_grad():
        out = model.test_step(data)
    assert out[0].pred_panoptic_seg.sem_seg.shape[-2:] == (96, 128)
    try:
        import panopticapi  # noqa: F401
    except ImportError:
        # the training data: COCO's panoptic PNGs, read with panopticapi (mmdet's message)
        with DefaultScope.overwrite_default_scope('mmdet'), \
                pytest.raises(ImportError, match='pip install git\\+https://github.com/'
                                                 'cocodataset/panopticapi.git'):
            Runner.build_dataloader(dict(cfg.train_dataloader, num_workers=0,
                                         persistent_workers=False))
