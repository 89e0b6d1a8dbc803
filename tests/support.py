"""What the tests share that is not a fixture, importable without side effects: by
conftest.py, by the tests, and by reliability_support.py inside training subprocesses
(where importing conftest would set the test process up). The one tiny detector and the
one tiny segmentor of the tests are the shipped configs through :func:`shrink_detector`
and :func:`shrink_segmentor`."""
import contextlib
import os
import socket
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Dict, Sequence, Tuple, Union

import pytest
import torch

from inline_mm.models import FAMILIES

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / 'tests'


def smoke_backbone(family, seed: Union[int, None] = None, **overrides) -> torch.nn.Module:
    """A family's ``smoke`` configuration (``family``: its name or its
    :class:`~inline_mm.models.families.Family`) with ``overrides``, in train mode; weights
    drawn after ``torch.manual_seed(seed)`` when a seed is given."""
    family = FAMILIES[family] if isinstance(family, str) else family
    if seed is not None:
        torch.manual_seed(seed)
    return family.cls(**{**family.smoke, **overrides})


def param_counts_test(cls, counts: Dict[str, Tuple[int, int]], added):
    """A test per preset ``arch`` of ``counts`` (``arch -> (official, ours)``: the released
    model's parameters without its classifier head, and this backbone's): ours are the
    official ones plus ``added(model)`` (the output norms we add), and the model has them."""
    @pytest.mark.parametrize('arch', list(counts))
    def test_param_counts(arch):
        official, ours = counts[arch]
        with torch.device('meta'):
            model = cls(arch=arch)
        assert official + added(model) == ours
        assert sum(p.numel() for p in model.parameters()) == ours
        assert model.arch_name == arch
    return test_param_counts


def invalid_arguments_test(cls, cases: Sequence[Tuple[dict, str]]):
    """A test that ``cls(**kwargs)`` raises ``ValueError`` matching ``message`` for each
    ``(kwargs, message)`` of ``cases`` (one per case): each family's argument checks."""
    @pytest.mark.parametrize('kwargs,message', cases)
    def test_invalid_arguments(kwargs, message):
        with pytest.raises(ValueError, match=message):
            cls(**kwargs)
    return test_invalid_arguments


def load_script(path: Union[str, Path], name: Union[str, None] = None):
    """A script of the repository (``path`` relative to its root, e.g.
    ``'tools/demo.py'``) imported as a module, without running it as ``__main__``."""
    import importlib.util
    path = ROOT / path
    spec = importlib.util.spec_from_file_location(name or f'_script_{path.stem}', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def stir(module: torch.nn.Module, gain: float = 3.0, seed: Union[int, None] = None):
    """``module`` with random weights (``gain / sqrt(fan-in)``) and biases (``gain / 10``),
    drawn after ``torch.manual_seed(seed)`` when a seed is given: strong enough that every
    term of InLine attention (the global one, the local one) shows in its output."""
    if seed is not None:
        torch.manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            std = gain / (p[0].numel() ** 0.5) if p.dim() > 1 else gain / 10
            p.copy_(torch.randn_like(p) * std)
    return module


def padded_canvas(images: Sequence[torch.Tensor], hw: Tuple[int, int]) -> torch.Tensor:
    """Images ``(3, h, w)`` zero-padded bottom/right into one ``(B, 3, H, W)`` batch, as
    mmdet's and mmseg's data preprocessors pad."""
    batch = torch.zeros(len(images), 3, *hw, dtype=images[0].dtype)
    for i, img in enumerate(images):
        batch[i, :, :img.shape[1], :img.shape[2]] = img
    return batch


@contextlib.contextmanager
def quiet_tracer():
    """Tracing and export without their warnings (size arithmetic becoming constants is
    what a size-locked graph is for)."""
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        yield


def subprocess_env(**extra: str) -> Dict[str, str]:
    """The environment of a tool started by a test: one thread per process (the 2 cores are
    shared by parallel workers), unbuffered logs, this checkout first on PYTHONPATH."""
    env = dict(os.environ, OMP_NUM_THREADS='1', MKL_NUM_THREADS='1', PYTHONUNBUFFERED='1')
    env['PYTHONPATH'] = os.pathsep.join([str(ROOT), env.get('PYTHONPATH', '')]).rstrip(os.pathsep)
    env.update(extra)
    return env


def free_port() -> int:
    """A TCP port nothing listens on now (tests running in parallel need their own)."""
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def shrink_backbone(backbone: dict) -> dict:
    """A config's backbone made CPU-test sized, in place: the widths of its family's
    ``smoke`` configuration; a pyramid keeps its stage types (the preset's or the
    config's) with one block per stage, two (first and last type) in a mixed stage."""
    family = FAMILIES[backbone['type']]
    preset = family.presets[backbone.get('arch', 'tiny')]
    backbone.update({k: v for k, v in family.smoke.items()
                     if k not in ('depths', 'stage_types', 'drop_path_rate')}, init_cfg=None)
    types = backbone.get('stage_types') or preset.get('stage_types')
    if types is not None:
        backbone['stage_types'] = [t if isinstance(t, str) else (t[0], t[-1]) for t in types]
        backbone['depths'] = [1 if isinstance(t, str) else 2 for t in backbone['stage_types']]
    return backbone


def out_channels(backbone: dict) -> list:
    """Output channels of a config's backbone (built on the meta device)."""
    args = {k: v for k, v in backbone.items() if k not in ('type', 'init_cfg')}
    with torch.device('meta'):
        return list(FAMILIES[backbone['type']].cls(**args).out_channels)


#: input side of the shrunken segmentors' training batches
SEG_SIZE = 64
#: width of the shrunken query-based heads (DINO, Mask2Former) and one-stage heads: their
#: GroupNorms have 32 groups
HEAD_WIDTH = 32


def _shrink_transformer_layers(layer_cfg: dict, width: int):
    """A DETR-style layer config (``self_attn_cfg``, ``cross_attn_cfg``, ``ffn_cfg``) at
    ``width`` channels, 4 attention heads and a 2x feed-forward."""
    for key in ('self_attn_cfg', 'cross_attn_cfg'):
        if key in layer_cfg:
            layer_cfg[key].update(embed_dims=width, num_heads=4)
    layer_cfg.ffn_cfg.update(embed_dims=width, feedforward_channels=2 * width)


def shrink_mask2former_head(head, in_channels: list, width: int = HEAD_WIDTH):
    """mmdet's / mmseg's ``Mask2FormerHead`` config made CPU-test sized, in place: ``width``
    channels, one pixel-decoder encoder layer, one decoder layer per feature level, 10
    queries, 64 sampled points per mask."""
    head.update(in_channels=in_channels, feat_channels=width, out_channels=width,
                num_queries=10)
    decoder = head.pixel_decoder
    decoder.encoder.num_layers = 1
    _shrink_transformer_layers(decoder.encoder.layer_cfg, width)
    decoder.positional_encoding.num_feats = width // 2
    head.positional_encoding.num_feats = width // 2
    head.transformer_decoder.num_layers = head.get('num_transformer_feat_level', 3)
    _shrink_transformer_layers(head.transformer_decoder.layer_cfg, width)
    if head.get('train_cfg'):           # (mmdet keeps it in the model's train_cfg)
        head.train_cfg.num_points = 64
    return head


def shrink_segmentor(cfg):
    """A segmentation config's model made CPU-test sized, in place: the backbone as
    :func:`shrink_backbone`, 16-channel neck and heads (a Mask2Former head as
    :func:`shrink_mask2former_head`), 64-pixel training inputs."""
    model = cfg.model
    chans = out_channels(shrink_backbone(model.backbone))
    model.data_preprocessor.size = (SEG_SIZE, SEG_SIZE)
    if model.decode_head.type == 'Mask2FormerHead':
        shrink_mask2former_head(model.decode_head, chans)
    elif model.get('neck'):
        model.neck.update(in_channels=chans, out_channels=16)
        model.decode_head.update(in_channels=[16] * 4, channels=16)
    else:
        model.decode_head.update(in_channels=chans, channels=16)
    if model.get('auxiliary_head'):      # (after a neck, the heads see the neck's maps)
        aux_in = 16 if model.get('neck') else chans[model.auxiliary_head.in_index]
        model.auxiliary_head.update(in_channels=aux_in, channels=8)
    if model.test_cfg.get('mode') == 'slide':
        model.test_cfg.update(crop_size=(48, 48), stride=(32, 32))
    return cfg


def shrink_detector(cfg):
    """A detector config's model made CPU-test sized, in place: the backbone as
    :func:`shrink_backbone`; (Cascade) Mask R-CNN: a 16-channel neck, RPN and RoI heads
    (every cascade stage); RetinaNet, FCOS: a 32-channel neck and one-conv head for 8
    classes; DINO:
    one encoder and two decoder layers, 20 queries (its width stays 256); Mask2Former:
    :func:`shrink_mask2former_head`."""
    model = cfg.model
    chans = out_channels(shrink_backbone(model.backbone))
    width = HEAD_WIDTH
    if model.get('panoptic_head'):                                    # Mask2Former
        shrink_mask2former_head(model.panoptic_head, chans, width)
        model.train_cfg.num_points = 64
        model.test_cfg.max_per_image = 10           # (top-k of queries x classes)
        return cfg
    if model.type == 'DINO':
        width = 256         # its decoder encodes box coordinates in 4 x 128 sine features
        model.neck.update(in_channels=chans, out_channels=width)
        model.encoder.num_layers, model.decoder.num_layers = 1, 2
        _shrink_transformer_layers(model.encoder.layer_cfg, width)
        _shrink_transformer_layers(model.decoder.layer_cfg, width)
        model.positional_encoding.num_feats = width // 2
        model.num_queries = model.test_cfg.max_per_img = 20   # (top-k of queries x classes)
        model.dn_cfg.group_cfg.num_dn_queries = 10
        model.bbox_head.embed_dims = width
        return cfg
    if not model.get('roi_head'):                                     # RetinaNet, FCOS
        model.neck.update(in_channels=chans, out_channels=width)
        # 8 classes: an untrained dense head scores every anchor of every class, and
        # ranking 80 classes' scores over a 1333x800 image costs seconds on CPU
        model.bbox_head.update(in_channels=width, feat_channels=width, stacked_convs=1,
                               num_classes=8)
        if model.bbox_head.type == 'FCOSHead':
            # its GroupNorms (32 groups by default) meet 1x1 maps at P7 of a toy image:
            # two channels a group, so that a group of one image is not a single value
            model.bbox_head.norm_cfg = dict(type='GN', num_groups=width // 2,
                                            requires_grad=True)
        return cfg
    model.neck.update(in_channels=chans[-1] if model.neck.type == 'SimpleFPN' else chans,
                      out_channels=16)
    model.rpn_head.update(in_channels=16, feat_channels=16)
    roi = model.roi_head
    roi.bbox_roi_extractor.out_channels = roi.mask_roi_extractor.out_channels = 16
    bbox_heads = roi.bbox_head if isinstance(roi.bbox_head, list) else [roi.bbox_head]
    for head in bbox_heads:     # (conv_out_channels: the cascades' 4-conv heads)
        head.update(in_channels=16, conv_out_channels=16, fc_out_channels=32)
    roi.mask_head.update(in_channels=16, conv_out_channels=16, num_convs=1)
    return cfg


def write_tiny_config(config, path: Path) -> Path:
    """``config`` (a shipped file) with its model shrunk by :func:`shrink_detector` or
    :func:`shrink_segmentor`, written to ``path``: the ``_base_`` of a test config that a
    tool runs in seconds on CPU."""
    from mmengine.config import Config
    cfg = Config.fromfile(str(config))
    shrink = shrink_detector if cfg.default_scope == 'mmdet' else shrink_segmentor
    shrink(cfg).dump(str(path))
    return path


def set_num_classes(model, num_classes: int):
    """A detector config's model predicting ``num_classes`` classes, in place: every box and
    mask head of a (Cascade) Mask R-CNN, the head of a one-stage detector or DINO, the things
    of a Mask2Former (no stuff; its class weights, background last, follow)."""
    if model.get('roi_head'):
        roi = model.roi_head
        for head in roi.bbox_head if isinstance(roi.bbox_head, list) else [roi.bbox_head]:
            head.num_classes = num_classes
        roi.mask_head.num_classes = num_classes
    elif model.get('panoptic_head'):
        for head in (model.panoptic_head, model.panoptic_fusion_head):
            head.update(num_things_classes=num_classes, num_stuff_classes=0)
        model.panoptic_head.loss_cls.class_weight = [1.0] * num_classes + [0.1]
    else:
        model.bbox_head.num_classes = num_classes
    return model


def keep_low_scores(model):
    """A detector config's model keeping predictions of any score, in place: untrained
    heads score below the shipped thresholds (Mask R-CNN's box head, RetinaNet, FCOS).
    Returns whether the model predicts masks."""
    test_cfg = model.test_cfg
    if 'rcnn' in test_cfg:
        test_cfg.rcnn.score_thr = 0.
    elif 'score_thr' in test_cfg:
        test_cfg.score_thr = 0.
    return 'mask_head' in model.get('roi_head', {}) or 'panoptic_head' in model


def one_iteration(cfg):
    """``cfg`` set to train one iteration, validate at its end and save a checkpoint after
    it, logging every iteration, its loaders without worker processes; in place."""
    cfg.train_cfg = dict(type='IterBasedTrainLoop', max_iters=1, val_interval=1)
    cfg.param_scheduler = []
    cfg.default_hooks.logger = dict(type='LoggerHook', interval=1)
    cfg.default_hooks.checkpoint = dict(type='CheckpointHook', by_epoch=False, interval=1)
    cfg.log_processor = dict(by_epoch=False, window_size=1)
    for split in ('train', 'val', 'test'):
        cfg[f'{split}_dataloader'].update(num_workers=0, persistent_workers=False)
    return cfg


def on_toy_coco(cfg, data: Path, size: int = 64):
    """A shrunken detector config (:func:`shrink_detector`) training one iteration
    (:func:`one_iteration`) on the toy COCO set in ``data`` (``make_coco_toy``) at ``size``
    px, its classes, and validating and testing on its val split, every score kept
    (:func:`keep_low_scores`); in place. A Mask2Former's
    large-scale-jitter padding is set to ``size`` too."""
    from inline_mm.datasets.toy.coco import DEFAULT_CLASSES
    root = f'{data}/'
    set_num_classes(cfg.model, len(DEFAULT_CLASSES))
    masks = keep_low_scores(cfg.model)
    load = [dict(type='LoadImageFromFile'),
            dict(type='LoadAnnotations', with_bbox=True, with_mask=masks),
            dict(type='Resize', scale=(size, size), keep_ratio=True)]
    for split, pipeline in (('train', load + [dict(type='PackDetInputs')]),
                            ('val', load + [dict(type='PackDetInputs', meta_keys=(
                                'img_id', 'img_path', 'ori_shape', 'img_shape',
                                'scale_factor'))])):
        loader = cfg[f'{split}_dataloader']
        loader.batch_size = 2 if split == 'train' else 1
        loader.dataset.update(data_root=root, metainfo=dict(classes=DEFAULT_CLASSES),
                              pipeline=pipeline)
    for augment in cfg.model.data_preprocessor.get('batch_augments') or []:
        augment.size = (size, size)                     # Mask2Former: BatchFixedSizePad
    cfg.test_dataloader = cfg.val_dataloader
    cfg.val_evaluator.ann_file = root + 'annotations/instances_val2017.json'
    cfg.test_evaluator = cfg.val_evaluator
    return one_iteration(cfg)


def on_toy_seg(cfg, data: Path):
    """A shrunken segmentation config (:func:`shrink_segmentor`) training one iteration
    (:func:`one_iteration`) on the toy set in ``data`` (ADE20K or Cityscapes layout, as the
    config reads), and validating and testing on its val split; in place. The shipped
    pipelines are kept (the mask checks included) with their sizes scaled so that the
    training crop is ``SEG_SIZE`` high."""
    crop = next(t.crop_size for t in cfg.train_dataloader.dataset.pipeline
                if t.type == 'RandomCrop')
    factor = SEG_SIZE / crop[0]

    def scaled(size):
        return tuple(max(SEG_SIZE, round(v * factor)) for v in size)

    cfg.model.data_preprocessor.size = scaled(crop)
    for split, loader in (('train', cfg.train_dataloader), ('val', cfg.val_dataloader)):
        for step in loader.dataset.pipeline:
            if step.type in ('RandomResize', 'Resize'):
                step.scale = scaled(step.scale)
            elif step.type == 'RandomChoiceResize':                   # Mask2Former's
                step.update(scales=[SEG_SIZE, 2 * SEG_SIZE], max_size=8 * SEG_SIZE)
            elif step.type == 'RandomCrop':
                step.crop_size = scaled(crop)
        loader.dataset.data_root = str(data)
        loader.batch_size = 2 if split == 'train' else 1
    cfg.test_dataloader = cfg.val_dataloader
    return one_iteration(cfg)


def write_toy_coco_config(config, base: Path, data: Path, size: int, extra: str = '',
                          classes=None) -> Path:
    """A child of ``config`` (a shipped detector, shrunk by :func:`write_tiny_config` into
    ``base``) that trains, validates and tests on the toy COCO set in ``data`` at ``size``
    px, one batch-2 train and batch-1 test loader without workers; ``classes`` names the
    set's classes where the model is to predict only those; ``extra`` (config lines: the
    test's schedule and hooks) is appended. Written to ``base / 'tiny.py'``."""
    dataset = 'data_root=data_root, '
    head = f"""
_base_ = {str(write_tiny_config(config, base / 'tiny_base.py'))!r}
data_root = {str(data) + '/'!r}
"""
    if classes is not None:
        dataset += 'metainfo=metainfo, '
        head += f"""metainfo = dict(classes={tuple(classes)!r})
model = dict(roi_head=dict(bbox_head=dict(num_classes={len(classes)}),
                           mask_head=dict(num_classes={len(classes)})))
"""
    cfg = base / 'tiny.py'
    cfg.write_text(head + f"""train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='Resize', scale=({size}, {size}), keep_ratio=True),
    dict(type='PackDetInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=({size}, {size}), keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='PackDetInputs', meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape',
                                          'scale_factor')),
]
train_dataloader = dict(batch_size=2, num_workers=0, persistent_workers=False,
                        dataset=dict({dataset}pipeline=train_pipeline))
val_dataloader = dict(batch_size=1, num_workers=0, persistent_workers=False,
                      dataset=dict({dataset}pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file=data_root + 'annotations/instances_val2017.json')
test_evaluator = val_evaluator
log_processor = dict(window_size=1)
""" + extra)
    return cfg


def run_quick_benchmark(out_dir: Path, *flags: str) -> str:
    """``python -m benchmarks FLAGS --quick --out-dir OUT_DIR`` as a user runs it; its
    stdout, after failing the test with the run's last output when it exits non-zero."""
    proc = subprocess.run([sys.executable, '-m', 'benchmarks', *flags, '--quick', '--out-dir',
                           str(out_dir)],
                          capture_output=True, text=True, env=subprocess_env(), cwd=ROOT,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def assert_compiled_matches(compiled, model, x: torch.Tensor, tol: float = 1e-5):
    """``compiled(x)`` gives ``model(x)``'s outputs and input gradient (of the mean squares of
    the outputs) within ``tol``."""
    xc = x.detach().clone().requires_grad_()
    xe = x.detach().clone().requires_grad_()
    got, ref = compiled(xc), model(xe)
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r, rtol=tol, atol=tol)
    sum(o.square().mean() for o in got).backward()
    sum(o.square().mean() for o in ref).backward()
    torch.testing.assert_close(xc.grad, xe.grad, rtol=tol, atol=tol)


def fx_trace_matching(model) -> torch.fx.GraphModule:
    """``torch.fx.symbolic_trace(model)``, checked to give the model's outputs exactly at an
    even batch of 2 and an odd single image of another size."""
    graph = torch.fx.symbolic_trace(model)
    for size in [(2, 3, 64, 96), (1, 3, 75, 61)]:
        x = torch.randn(*size)
        with torch.no_grad():
            for got, ref in zip(graph(x), model(x)):
                torch.testing.assert_close(got, ref, rtol=0, atol=0)
    return graph
