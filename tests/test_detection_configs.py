"""Every Mask R-CNN and Cascade Mask R-CNN config parses, its neck and heads take what the
part before them gives, and every distinct model builds with a shrunken backbone and runs
one loss step (forward + backward) on CPU."""
import copy
import functools
import re
from pathlib import Path

import pytest
import torch
from mmengine.config import Config

import config_spec as spec
from conftest import CUSTOM_IMPORTS, out_channels, shrink_backbone

from inline_mm.models import weights
from inline_mm.models import FAMILIES

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob('configs/inline_*/*mask-rcnn_*.py'))
# AMP, FSDP and 3x configs change the optimiser / runner / schedule / pipeline, never the
# model: the model is built once per 1x config (and the demo config).
MODEL_CONFIGS = [p for p in CONFIGS
                 if '_amp-' not in p and '_fsdp-' not in p and '_ms-crop-3x_' not in p]

README = (ROOT / 'checkpoints' / 'README.md').read_text()


@functools.lru_cache(maxsize=None)
def _parse(path):
    return Config.fromfile(str(ROOT / path))


def load(path):
    return copy.deepcopy(_parse(path))


def neck_in_channels(neck: dict, backbone: dict):
    """What the neck takes: every output's channels (FPN), or the one map's channels of a
    plain backbone (SimpleFPN, on the last output)."""
    chans = out_channels(backbone)
    return chans[-1] if neck.type == 'SimpleFPN' else chans


def model_sibling(path: str) -> str:
    """The config that defines ``path``'s model: its 1x, non-AMP sibling."""
    return re.sub(r'_(amp-(bf16-)?|fsdp-)', '_', path).replace('_ms-crop-3x_', '_1x_')


def test_detection_config_families_present():
    names = {Path(p).name for p in CONFIGS}
    for backbone in spec.BACKBONES:
        neck = 'simple-fpn' if backbone.startswith('deit') else 'fpn'
        for sched in [a + s for s in ('1x', 'ms-crop-3x') for a in ('', 'amp-')]:
            assert f'mask-rcnn_inline-{backbone}_{neck}_{sched}_coco.py' in names
        if backbone.endswith('-t'):     # one bf16 AMP child per family
            assert f'mask-rcnn_inline-{backbone}_{neck}_amp-bf16-1x_coco.py' in names
    # Cascade Mask R-CNN: the paper's COCO backbones, with AMP children for the T variants
    for backbone in ('swin-t', 'swin-s', 'swin-b', 'pvt-t', 'pvt-s', 'pvt-m', 'pvt-l'):
        scheds = ('1x', 'ms-crop-3x') + (('amp-1x', 'amp-ms-crop-3x') if backbone.endswith('-t')
                                         else ())
        for sched in scheds:
            assert f'cascade-mask-rcnn_inline-{backbone}_fpn_{sched}_coco.py' in names


def check_head_channels(model: dict):
    """Each part after the neck takes the channels the part before it gives."""
    width = model.neck.out_channels
    assert model.rpn_head.in_channels == width
    roi = model.roi_head
    assert roi.bbox_roi_extractor.out_channels == roi.mask_roi_extractor.out_channels == width
    bbox_heads = roi.bbox_head if isinstance(roi.bbox_head, list) else [roi.bbox_head]
    mask_heads = roi.mask_head if isinstance(roi.mask_head, list) else [roi.mask_head]
    assert all(h.in_channels == width for h in bbox_heads + mask_heads)


@pytest.mark.parametrize('path', CONFIGS)
def test_detection_config_parses(path):
    cfg = load(path)
    assert cfg.default_scope == 'mmdet'
    assert cfg.custom_imports == CUSTOM_IMPORTS
    backbone = cfg.model.backbone
    assert backbone.type in FAMILIES
    assert cfg.model.neck.in_channels == neck_in_channels(cfg.model.neck, backbone)
    check_head_channels(cfg.model)
    if Path(path).name.startswith('cascade-'):
        # mmdet's ConvNeXt / Swin cascade heads: 4 convs + 1 fc, decoded boxes, GIoU
        assert (cfg.model.type, cfg.model.roi_head.type) == ('CascadeRCNN', 'CascadeRoIHead')
        heads = cfg.model.roi_head.bbox_head
        assert len(heads) == cfg.model.roi_head.num_stages == 3
        for head in heads:
            assert (head.type, head.loss_bbox.type) == ('Shared4Conv1FCBBoxHead', 'GIoULoss')
            assert head.reg_decoded_bbox
        assert [h.bbox_coder.target_stds[0] for h in heads] == \
            spec.DETECTION['swin', '1x']['cascade_target_stds'].value
    # proposals only from each image's own anchors (tests/test_padding.py)
    assert cfg.model.rpn_head.type == 'PadAwareRPNHead'
    ckpt = (backbone.init_cfg or {}).get('checkpoint')
    if 'toy-coco' in path:
        assert backbone.init_cfg is None          # the demo trains from scratch
    else:
        # COCO configs start from the official file of their backbone, by short name
        # (inline_mm.models.weights; documented in checkpoints/README.md).
        official = weights.target(ckpt)
        assert official.release and f'`{ckpt}`' in README, ckpt
        assert (official.family.name, official.release.arch) == (backbone.type, backbone.arch)
        # the recipe of tests/config_spec.py, field by field (drop path by head, schedule
        # and size)
        variant = re.search(r'_inline-([a-z]+-[a-z])_', path).group(1)
        cls, arch = spec.BACKBONES[variant]
        head = Path(path).name.split('_')[0]
        sched = spec.schedule(Path(path).name)
        assert (backbone.type, backbone.arch, backbone.drop_path_rate) == \
            (cls, arch, spec.DROP_PATH[head, sched][variant].value)
        recipe = spec.DETECTION[spec.DETECTION_RULE[variant.split('-')[0]], sched]
        spec.check_coco(cfg, spec.values(recipe), cls)
    amp = '_amp-' in path
    assert (cfg.optim_wrapper.type == 'AmpOptimWrapper') == amp
    if amp and '_amp-bf16-' not in path:
        # amp_optimizer: the parent's recipe but for the wrapper's type (lr included)
        assert spec.DETECTION['swin', '1x']['amp_optimizer'].value == "the parent's"
        parent = load(path.replace('_amp-', '_')).to_dict()
        child = cfg.to_dict()
        child['optim_wrapper'].pop('type')
        parent['optim_wrapper'].pop('type')
        assert child == parent
    # bf16 children: their fp16 AMP parent with the autocast dtype changed, nothing else
    assert cfg.optim_wrapper.get('dtype') == ('bfloat16' if '_amp-bf16-' in path else None)
    if '_amp-bf16-' in path:
        parent = load(path.replace('_amp-bf16-', '_amp-')).to_dict()
        child = cfg.to_dict()
        child['optim_wrapper'].pop('dtype')
        assert child == parent
    if path not in MODEL_CONFIGS:
        # its 1x sibling's model, but for the drop path of its schedule (checked above)
        sibling = load(model_sibling(path)).model
        sibling.backbone.drop_path_rate = cfg.model.backbone.drop_path_rate
        assert cfg.model == sibling


def shrunken_model(cfg):
    from mmdet.registry import MODELS
    from mmdet.utils import register_all_modules
    register_all_modules()
    shrink_backbone(cfg.model.backbone)
    cfg.model.neck.in_channels = neck_in_channels(cfg.model.neck, cfg.model.backbone)
    if isinstance(cfg.model.roi_head.bbox_head, list):
        # Three 4-conv box heads and three mask heads at 256 channels take ~15 s a step on
        # one core; their widths do not depend on the backbone (check_head_channels).
        for head in cfg.model.roi_head.bbox_head:
            head.update(conv_out_channels=16, fc_out_channels=32)
        cfg.model.roi_head.mask_head.conv_out_channels = 16   # (one per stage, alike)
    model = MODELS.build(cfg.model)
    model.init_weights()
    return model


@pytest.mark.parametrize('path', MODEL_CONFIGS)
def test_detection_model_loss_step(path):
    from mmdet.testing import demo_mm_inputs
    from mmengine.optim import build_optim_wrapper
    cfg = load(path)
    model = shrunken_model(cfg).train()
    bbox_head = cfg.model.roi_head.bbox_head
    num_classes = (bbox_head[-1] if isinstance(bbox_head, list) else bbox_head).num_classes
    packed = demo_mm_inputs(2, [[3, 64, 96], [3, 96, 80]], num_items=[2, 1], with_mask=True,
                            num_classes=num_classes)
    data = model.data_preprocessor(packed, True)
    # mmcv's RoIAlign reads its input as dense NCHW: features must be contiguous, or the
    # RoI heads see scrambled features (checked against torchvision, which follows strides).
    from mmcv.ops import roi_align
    from torchvision.ops import roi_align as tv_roi_align
    with torch.no_grad():
        feats = model.extract_feat(data['inputs'])
    assert all(f.is_contiguous() for f in model.backbone(data['inputs']))
    rois = torch.tensor([[0., 4., 6., 50., 40.], [1., 10., 3., 60., 90.]])
    assert torch.allclose(roi_align(feats[0], rois, (7, 7), 0.25, 2, 'avg', True),
                          tv_roi_align(feats[0], rois, (7, 7), 0.25, 2, True), atol=1e-5)
    losses = model(**data, mode='loss')
    stages = [f's{i}.' for i in range(cfg.model.roi_head.get('num_stages', 0))] or ['']
    for k in ['loss_rpn_cls'] + [s + k for s in stages for k in ('loss_cls', 'loss_bbox',
                                                                 'loss_mask')]:
        assert k in losses, sorted(losses)
    total, _ = model.parse_losses(losses)
    assert torch.isfinite(total)
    total.backward()
    grads = [p.grad for p in model.backbone.parameters() if p.requires_grad]
    assert grads and all(g is not None and torch.isfinite(g).all() for g in grads)

    # Every no-decay key of the config names parameters that exist, and gets no decay.
    optim = build_optim_wrapper(model, cfg.optim_wrapper)
    decay_of = {}
    names = {id(p): n for n, p in model.named_parameters()}
    for group in optim.optimizer.param_groups:   # (the wrapper's adds a base-lr record)
        for p in group['params']:
            decay_of[names[id(p)]] = group['weight_decay']
    for key, opts in cfg.optim_wrapper.paramwise_cfg.custom_keys.items():
        hit = [n for n in decay_of if key in n]
        assert hit, f'custom key {key!r} matches no parameter of {path}'
        if opts.get('decay_mult') == 0:
            assert all(decay_of[n] == 0 for n in hit), key
    assert max(decay_of.values()) == cfg.optim_wrapper.optimizer.weight_decay


@pytest.mark.parametrize('path', [p for p in CONFIGS if Path(p).name.startswith('cascade-')
                                  and '_fsdp-' not in p])    # (tests/test_fsdp.py)
def test_cascade_config_trains_as_its_mask_rcnn_sibling(path):
    """A Cascade config and the Mask R-CNN config of the same name differ in the RoI heads
    only: backbone, neck, RPN, data, schedule and optimiser are the same recipe (the
    cascade recipes share configs/_base_/coco_instance_*.py with the Mask R-CNN ones, but
    each family file lists its own bases; this keeps them in step)."""
    cascade = load(path)
    mask_rcnn = load(str(Path(path).with_name(Path(path).name[len('cascade-'):])))
    for key in ('backbone', 'neck', 'data_preprocessor'):
        assert cascade.model[key] == mask_rcnn.model[key], key
    # the RPN as well, but for its box loss: mmdet's cascade base keeps Smooth L1 there,
    # its Mask R-CNN base has moved to L1
    rpn = {k: v for k, v in cascade.model.rpn_head.items() if k != 'loss_bbox'}
    assert rpn == {k: v for k, v in mask_rcnn.model.rpn_head.items() if k != 'loss_bbox'}
    for key in ('train_dataloader', 'val_dataloader', 'train_cfg', 'param_scheduler',
                'optim_wrapper', 'custom_imports', 'default_hooks'):
        assert cascade[key] == mask_rcnn[key], key


def test_every_recipe_value_names_its_source():
    """Each value of tests/config_spec.py says where it comes from: a sister repository at
    the commit read and its file, an mmdet/mmseg config, or ours and what it extrapolates."""
    lab = re.compile(r'LeapLabTHU/(Agent-Attention|MLLA|ViTTT|InLine)@[0-9a-f]{40} \S+\.(py|yaml)')
    for where, source in spec.sources():
        assert lab.search(source) or source.startswith(('ours: ', 'mmdet 3.', 'mmseg 1.')), \
            (where, source)
        if source.startswith('ours: '):
            assert len(source) > 30, (where, source)     # says why
