"""Every shipped config through its framework's stock inference entry points.

mmseg: ``MMSegInferencer`` and ``init_model`` + ``inference_model``; mmdet:
``DetInferencer`` and ``init_detector`` + ``inference_detector``. Each with random
weights and with a checkpoint saved from the same model: the checkpoint must give the
very predictions of the weights it was saved from. Configs are deduplicated by what
inference reads (the shrunken model and the test pipeline): AMP and schedule variants
share their model and pipeline.
"""
import copy
import functools
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from mmengine.config import Config
from PIL import Image

from support import keep_low_scores, shrink_detector, shrink_segmentor

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / 'configs'


@functools.lru_cache(maxsize=None)
def _parse(path: str) -> Config:
    return Config.fromfile(path)


def _shrunk(path: Path) -> Config:
    """The config with a CPU-test sized model; inference as shipped (the test pipeline,
    and a sliding window of the shipped size over the resized image)."""
    cfg = copy.deepcopy(_parse(str(path)))
    if cfg.default_scope == 'mmdet':
        return shrink_detector(cfg)
    test_cfg = copy.deepcopy(cfg.model.test_cfg)
    shrink_segmentor(cfg).model.test_cfg = test_cfg
    return cfg


def _distinct(paths):
    """One config per distinct (model, test pipeline), the first by name."""
    seen, kept = set(), []
    for path in paths:
        cfg = _shrunk(path)
        pipeline = cfg.test_dataloader.dataset.get('pipeline') or cfg.get('test_pipeline')
        key = json.dumps([cfg.model.to_dict(), pipeline], sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            kept.append(path)
    return kept


# The ablations (configs/ablations/) change only the backbone's attention switches: two stand
# for them here (linear attention; windowed InLine), each forward is trained in
# tests/test_ablation_configs.py.
ABLATIONS = CONFIGS / 'ablations'
# Cityscapes: the T recipes (whole-image inference at 1024x2048); the S and B models are
# their ADE20K siblings' with 19 classes, and the slide child's sliding is the ADE20K slide
# config's (its Cityscapes windows run in test_cityscapes.py, at the toy set's size).
CITYSCAPES = ('inline-swin-t-in1k-pre_upernet_4xb2-80k_cityscapes-512x1024.py',
              'fpn_inline-pvt-t_4xb2-80k_cityscapes-512x1024.py')
SEG = _distinct(sorted(p for p in CONFIGS.glob('*/*.py')
                       if p.parent.name not in ('_base_', 'ablations')
                       if 'ade20k' in p.name or p.name in CITYSCAPES
                       or p.parent.name == 'custom' and 'custom-coco' not in p.name)
                + [ABLATIONS / 'inline-swin-t-linear-relu-nolocal-in1k-pre_upernet_8xb2-160k_'
                   'ade20k-512x512.py'])
# Every detector but the panoptic Mask2Former, whose test pipeline reads COCO's panoptic
# PNGs with panopticapi (not installable here; its build is tested in test_head_configs.py).
DET = _distinct(sorted(p for p in CONFIGS.glob('inline_*/*.py')
                       if _parse(str(p)).default_scope == 'mmdet' and 'panoptic' not in p.name)
                + [ABLATIONS / 'mask-rcnn_inline-swin-t-inline-win7_fpn_1x_coco.py'])


def _ids(paths):
    return [p.name for p in paths]


def test_the_matrix_covers_every_family_and_both_kinds():
    for paths in (SEG, DET):
        families = {_parse(str(p)).model.backbone.type for p in paths}
        assert families >= {'InLineSwin', 'InLinePVT', 'InLineDeiT'}, families
    assert any(p.parent.name == 'custom' for p in SEG)       # the own-data template
    assert any('slide' in p.name for p in SEG)               # sliding-window inference
    assert any('cswin' in p.name for p in DET)
    assert any(p.name.startswith('cascade-') for p in DET)
    assert any('cswin' in p.name for p in SEG)
    assert sum(p.parent == ABLATIONS for p in SEG + DET) == 2
    # the heads beyond Mask R-CNN and UperNet / Semantic FPN, and the Cityscapes recipes
    for prefix in ('retinanet_', 'fcos_', 'dino-', 'mask2former_'):
        assert any(p.name.startswith(prefix) for p in DET), prefix
    for prefix in ('mask2former_', 'segformer_'):
        assert any(p.name.startswith(prefix) for p in SEG), prefix
    assert sum('cityscapes' in p.name for p in SEG) == len(CITYSCAPES)


@pytest.fixture(scope='module')
def image(tmp_path_factory):
    """A non-square photo-like JPEG (smooth colours, a few shapes) and its pixels (BGR)."""
    rng = np.random.default_rng(0)
    h, w = 75, 110
    yy, xx = np.mgrid[:h, :w]
    rgb = np.stack([xx * 255 // w, yy * 255 // h, (xx + yy) % 256], -1).astype(np.uint8)
    rgb[20:50, 30:70] = rng.integers(0, 256, 3)
    path = tmp_path_factory.mktemp('img') / 'photo.jpg'
    Image.fromarray(rgb).save(path, quality=95)
    import mmcv
    return str(path), mmcv.imread(str(path))


def _initialised(inferencer):
    """The inferencer with its model's weights initialised as mmengine's Runner does.

    Without ``weights`` the stock inferencers only build the model, and some heads keep
    parameters of uninitialised memory until ``init_weights`` runs (mmdet's DINO: its
    ``level_embed``), which can hold NaN or inf: predictions would then be NaN at random.
    """
    inferencer.model.init_weights()
    return inferencer


def _checkpoint(model, path: Path) -> str:
    """The weights as mmengine's Runner saves them (state dict and dataset meta)."""
    meta = dict(dataset_meta=copy.deepcopy(getattr(model, 'dataset_meta', None) or {}))
    torch.save(dict(meta=meta, state_dict=model.state_dict()), path)
    return str(path)


@pytest.mark.parametrize('path', SEG, ids=_ids(SEG))
def test_mmseg_inferencers(path, image, tmp_path):
    from mmseg.apis import MMSegInferencer, inference_model, init_model
    img_path, pixels = image
    cfg = _shrunk(path)
    num_classes = cfg.model.decode_head.num_classes

    random = _initialised(MMSegInferencer(model=copy.deepcopy(cfg), device='cpu'))
    pred = random(img_path, return_datasamples=True).pred_sem_seg.data
    random(img_path, out_dir=str(tmp_path / 'out'))          # as the README shows it
    assert (tmp_path / 'out/vis/photo.jpg').is_file()
    saved = np.array(Image.open(tmp_path / 'out/pred/00000000_pred.png'))   # class indices
    assert np.array_equal(saved, pred[0].numpy())
    assert pred.shape == (1, *pixels.shape[:2])
    assert 0 <= int(pred.min()) and int(pred.max()) < num_classes

    ckpt = _checkpoint(random.model, tmp_path / 'model.pth')
    loaded = MMSegInferencer(model=copy.deepcopy(cfg), weights=ckpt, device='cpu')
    assert torch.equal(loaded(pixels, return_datasamples=True).pred_sem_seg.data, pred)

    model = init_model(copy.deepcopy(cfg), ckpt, device='cpu')
    for given in (img_path, pixels):
        assert torch.equal(inference_model(model, given).pred_sem_seg.data, pred)


@pytest.mark.parametrize('path', DET, ids=_ids(DET))
def test_mmdet_inferencers(path, image, tmp_path):
    from mmdet.apis import DetInferencer, inference_detector, init_detector
    img_path, pixels = image
    cfg = _shrunk(path)
    with_masks = keep_low_scores(cfg.model)

    random = _initialised(DetInferencer(model=copy.deepcopy(cfg), device='cpu',
                                        show_progress=False))
    out = random(img_path, return_datasamples=True, no_save_vis=True)['predictions'][0]
    random(img_path, out_dir=str(tmp_path / 'out'), no_save_pred=False)   # as in the README
    assert (tmp_path / 'out/vis/photo.jpg').is_file()
    saved = json.loads((tmp_path / 'out/preds/photo.json').read_text())
    assert len(saved['scores']) == len(out.pred_instances.scores)
    inst = out.pred_instances
    assert len(inst.scores) > 0 and torch.isfinite(inst.bboxes).all()
    assert inst.bboxes.shape[1] == 4 and len(inst.scores) == len(inst.labels)
    assert ('masks' in inst) == with_masks
    if with_masks:
        assert len(inst.masks) == len(inst.scores) and inst.masks.shape[1:] == pixels.shape[:2]

    ckpt = _checkpoint(random.model, tmp_path / 'model.pth')
    loaded = DetInferencer(model=copy.deepcopy(cfg), weights=ckpt, device='cpu',
                           show_progress=False)
    again = loaded(pixels, return_datasamples=True, no_save_vis=True)['predictions'][0]
    assert torch.equal(again.pred_instances.bboxes, inst.bboxes)
    assert torch.equal(again.pred_instances.scores, inst.scores)

    model = init_detector(copy.deepcopy(cfg), ckpt, device='cpu')
    for given in (img_path, pixels):
        result = inference_detector(model, given).pred_instances
        assert torch.equal(result.bboxes, inst.bboxes)
        if with_masks:
            assert torch.equal(result.masks, inst.masks)


@pytest.mark.parametrize('config', [
    'configs/inline_pvt/fpn_inline-pvt-t_4xb4-40k_ade20k-512x512.py',
    'configs/inline_swin/mask-rcnn_inline-swin-nano_fpn_1xb4-550it_toy-coco.py'])
def test_inferencers_take_the_config_file_as_users_give_it(config, image, monkeypatch):
    """A path, run from the repository root, at the config's real size."""
    monkeypatch.chdir(ROOT)
    img_path, pixels = image
    if 'ade20k' in config:
        from mmseg.apis import MMSegInferencer
        pred = MMSegInferencer(model=config, device='cpu')(img_path)['predictions']
        assert pred.shape == pixels.shape[:2]
    else:
        from mmdet.apis import DetInferencer
        out = DetInferencer(model=config, device='cpu', show_progress=False)(img_path)
        assert set(out['predictions'][0]) >= {'labels', 'scores', 'bboxes', 'masks'}


@pytest.mark.parametrize('config', ['inline_swin/mask-rcnn_inline-swin-t_fpn_1x_coco.py',
                                    'inline_swin/inline-swin-t-in1k-pre_upernet_8xb2-160k_'
                                    'ade20k-512x512.py'])
def test_inferencers_under_autocast_give_fp32_results(config, image, tmp_path):
    """Called under ``torch.autocast`` (bf16 on a CPU) the stock inferencers run the model
    in low precision and give fp32 results, drawn and saved as in fp32 (docs/detection.md,
    docs/segmentation.md; the patch row ``fp32_predictions``)."""
    img_path, _ = image
    cfg = _shrunk(CONFIGS / config)
    if cfg.default_scope == 'mmdet':
        from mmdet.apis import DetInferencer
        keep_low_scores(cfg.model)
        infer = _initialised(DetInferencer(model=cfg, device='cpu', show_progress=False))
        fields = lambda out: out['predictions'][0].pred_instances.items()  # noqa: E731
    else:
        from mmseg.apis import MMSegInferencer
        infer = _initialised(MMSegInferencer(model=cfg, device='cpu'))
        fields = lambda out: [('seg_logits', out.seg_logits.data)]        # noqa: E731
    from inline_mm.models.attention import InLineAttention
    dtypes = set()
    for module in infer.model.modules():
        if isinstance(module, InLineAttention):
            module.register_forward_hook(lambda m, i, o: dtypes.add(o.dtype))
    with torch.autocast('cpu', dtype=torch.bfloat16):
        out = infer(img_path, return_datasamples=True, out_dir=str(tmp_path / 'out'))
    assert dtypes == {torch.bfloat16}
    floating = {k: v.dtype for k, v in fields(out) if v.is_floating_point()}
    assert floating and set(floating.values()) == {torch.float32}, floating
    assert (tmp_path / 'out/vis/photo.jpg').is_file()
