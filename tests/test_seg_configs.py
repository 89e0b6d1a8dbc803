"""Every segmentation config parses, follows its recipe, builds (shrunken) and trains a step."""
import copy
import functools
import os
import re
from pathlib import Path

import pytest
import torch
from mmengine.config import Config
from mmengine.optim import build_optim_wrapper
from mmengine.registry import init_default_scope
from mmengine.structures import PixelData
from mmseg.registry import MODELS
from mmseg.structures import SegDataSample

import config_spec as spec
from conftest import CUSTOM_IMPORTS, SEG_SIZE as SIZE, out_channels, shrink_segmentor as shrink
from inline_mm.models import weights

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / 'configs'
# The UperNet and Semantic FPN recipes on ADE20K (the other heads: test_head_configs.py;
# Cityscapes: test_cityscapes.py).
SEG_CONFIGS = sorted(
    [p for d in ('inline_swin', 'inline_pvt', 'inline_cswin', 'inline_deit')
     for p in (CONFIGS / d).glob('*.py')
     if 'ade20k' in p.name and not p.name.startswith(('mask2former_', 'segformer_'))]
    + [p for p in (CONFIGS / 'custom').glob('*.py') if 'custom-coco' not in p.name])
IDS = [p.name for p in SEG_CONFIGS]


def _expected_names():
    names = []
    for v in 'tsb':
        for amp in ('', 'amp-'):
            names.append(f'inline-swin-{v}-in1k-pre_upernet_8xb2-{amp}160k_ade20k-512x512.py')
    names.append('inline-swin-t-in1k-pre_upernet_8xb2-160k_ade20k-512x512-slide.py')
    for v in 'tsml':
        for amp in ('', 'amp-'):
            names.append(f'fpn_inline-pvt-{v}_4xb4-{amp}40k_ade20k-512x512.py')
    for family in ('deit', 'cswin'):
        for v in 'tsb':
            for amp in ('', 'amp-'):
                names.append(
                    f'inline-{family}-{v}-in1k-pre_upernet_8xb2-{amp}160k_ade20k-512x512.py')
    # one bf16 AMP child per family
    names += [f'inline-{family}-t-in1k-pre_upernet_8xb2-amp-bf16-160k_ade20k-512x512.py'
              for family in ('swin', 'cswin', 'deit')]
    names.append('fpn_inline-pvt-t_4xb4-amp-bf16-40k_ade20k-512x512.py')
    names += ['inline-swin-t-in1k-pre_upernet_1xb4-20k_custom-512x512.py',
              'inline-swin-t-in1k-pre_upernet_1xb4-20k_custom-512x512_predict.py']
    return names


def test_every_recipe_has_its_configs():
    missing = set(_expected_names()) - set(IDS)
    assert not missing, f'segmentation configs missing: {sorted(missing)}'


def _batch(num_classes: int, ignore_index: int = 255):
    samples = []
    for _ in range(2):
        gt = torch.randint(0, num_classes, (1, SIZE, SIZE))
        gt[:, :4] = ignore_index
        s = SegDataSample(gt_sem_seg=PixelData(data=gt))
        s.set_metainfo(dict(img_shape=(SIZE, SIZE), ori_shape=(SIZE, SIZE),
                            pad_shape=(SIZE, SIZE)))
        samples.append(s)
    inputs = [torch.randint(0, 256, (3, SIZE, SIZE), dtype=torch.uint8) for _ in range(2)]
    return dict(inputs=inputs, data_samples=samples)


@functools.lru_cache(maxsize=None)
def _parse(path: str) -> Config:
    return Config.fromfile(path)


def _load(path) -> Config:
    """A fresh copy of a parsed config (parsing resolves mmseg:: bases, which is slow)."""
    cfg = copy.deepcopy(_parse(str(path)))
    init_default_scope(cfg.get('default_scope', 'mmseg'))
    return cfg


# bf16 children are their fp16 parents but for the autocast dtype (checked below), and the
# step here trains every AMP config under CPU bf16 autocast: they would repeat their parent.
STEP_CONFIGS = [p for p in SEG_CONFIGS if '-amp-bf16-' not in p.name]


@pytest.mark.parametrize('path', STEP_CONFIGS, ids=[p.name for p in STEP_CONFIGS])
def test_config_builds_and_trains_a_step(path):
    cfg = _load(path)
    assert cfg.default_scope == 'mmseg'
    assert cfg.custom_imports == CUSTOM_IMPORTS
    # the official file of this backbone, by short name (downloaded once into the cache)
    official = weights.target(cfg.model.backbone.init_cfg.checkpoint)
    assert official.release is not None
    assert (official.family.name, official.release.arch) == \
        (cfg.model.backbone.type, cfg.model.backbone.arch)
    num_classes = cfg.model.decode_head.num_classes
    model = MODELS.build(shrink(cfg).model)
    # The heads keep SyncBN as in mmseg; one process without torch.distributed must
    # still train (torch falls back to plain batch norm, the Runner reverts it).
    assert any(isinstance(m, torch.nn.SyncBatchNorm) for m in model.modules())
    assert not torch.distributed.is_initialized()
    model.train()
    amp = cfg.optim_wrapper.type == 'AmpOptimWrapper'
    if amp:     # AmpOptimWrapper needs CUDA: same model/optimizer, CPU bf16 autocast
        cfg.optim_wrapper.type = 'OptimWrapper'
        cfg.optim_wrapper.pop('loss_scale')
    optim = build_optim_wrapper(model, cfg.optim_wrapper)
    before = [p.detach().clone() for p in model.backbone.parameters()]
    with torch.autocast('cpu', dtype=torch.bfloat16, enabled=amp):
        log = model.train_step(_batch(num_classes), optim)
    assert torch.isfinite(log['loss'])
    assert 'decode.loss_ce' in log
    assert any(not torch.equal(a, b) for a, b in zip(before, model.backbone.parameters()))
    if cfg.model.test_cfg.get('mode') == 'slide':
        model.eval()
        with torch.no_grad():
            out = model.test_step(_batch(num_classes))
        assert out[0].pred_sem_seg.data.shape == (1, SIZE, SIZE)


# One config per backbone and decode head: the AMP and slide children are checked
# against their parents below, the custom template by its own test.
RECIPE_CONFIGS = [p for p in SEG_CONFIGS if p.parent.name != 'custom'
                  and '-amp-' not in p.name and not p.name.endswith('-slide.py')]


@pytest.mark.parametrize('path', RECIPE_CONFIGS, ids=lambda p: p.name)
def test_segmentation_recipe(path):
    """Backbone, widths, optimiser, schedule, batch and crop as config_spec states them
    for the config's backbone and decode head."""
    cfg = _load(path)
    head = 'upernet' if '_upernet_' in path.name else 'fpn'
    recipe = spec.values(spec.SEGMENTATION[head])
    variant = re.search(r'inline-([a-z]+-[a-z])[_-]', path.name).group(1)
    cls, arch = spec.BACKBONES[variant]
    bb = cfg.model.backbone
    rate = spec.DROP_PATH[head, spec.schedule(path.name)][variant].value
    assert (bb.type, bb.arch, bb.drop_path_rate) == (cls, arch, rate)
    assert bb.init_cfg.checkpoint == f"inline://{variant.replace('-', '_')}"
    chans = out_channels(bb)
    if cls == 'InLineDeiT':     # blocks 3/6/9/12 (last through the final norm), 4 scales
        deit = spec.DEIT_UPERNET
        assert (bb.out_indices, bb.final_norm) == (deit['out_indices'], deit['final_norm'])
        neck = cfg.model.neck
        assert (neck.type, neck.in_channels, neck.out_channels, neck.scales) == \
            ('MultiLevelNeck', chans, chans[-1], deit['scales'])
        head_in = [neck.out_channels] * len(neck.scales)
    elif head == 'fpn':
        assert cfg.model.neck.in_channels == chans
    else:
        head_in = chans
    if cfg.model.get('pretrained', 'absent') != 'absent':
        assert cfg.model.pretrained is None     # the base's ResNet/ViT file; ours: init_cfg
    assert cfg.model.decode_head.num_classes == spec.ADE20K['num_classes']
    if head == 'upernet':
        assert cfg.model.decode_head.in_channels == head_in
        assert cfg.model.auxiliary_head.in_channels == head_in[2]
        assert cfg.model.auxiliary_head.num_classes == spec.ADE20K['num_classes']
    if cls == 'InLineDeiT':     # mmseg's ViT UperNet: the auxiliary head on the 4th map
        recipe['aux'] = spec.DEIT_UPERNET['aux']
    # optimiser, no-decay keys, schedule, heads: tests/config_spec.py, field by field
    spec.check_segmentation(cfg, recipe, cls, recipe['max_iters'])
    # the name's GPUs x images per GPU: 16 images per step
    gpus, per_gpu = map(int, re.search(r'_(\d+)xb(\d+)-', path.name).groups())
    assert (gpus, cfg.train_dataloader.batch_size) == (recipe['gpus'], recipe['batch_size'])
    assert cfg.train_dataloader.batch_size == per_gpu and gpus * per_gpu == 16
    crop = [t for t in cfg.train_dataloader.dataset.pipeline if t.type == 'RandomCrop']
    assert crop[0].crop_size == spec.ADE20K['crop_size'] == cfg.model.data_preprocessor.size
    assert crop[0].crop_size == recipe['crop']
    test = [t for t in cfg.test_dataloader.dataset.pipeline if t.type == 'Resize']
    assert [t.scale for t in test] == [recipe['test_scale']]


@pytest.mark.parametrize('path', [p for p in SEG_CONFIGS if '-amp-' in p.name],
                         ids=lambda p: p.name)
def test_amp_variant_only_changes_the_optim_wrapper(path):
    """fp16 AMP children: the optimiser wrapper's type and loss scale; bf16 children
    (``amp-bf16-``): their fp16 parent with the autocast dtype set, nothing else."""
    amp = _load(path)
    plain = _load(path.with_name(re.sub('amp-(bf16-)?', '', path.name)))
    assert amp.optim_wrapper.type == 'AmpOptimWrapper'
    assert amp.optim_wrapper.loss_scale == 'dynamic'
    bf16 = '-amp-bf16-' in path.name
    assert amp.optim_wrapper.get('dtype') == ('bfloat16' if bf16 else None)
    if bf16:
        fp16 = _load(path.with_name(path.name.replace('amp-bf16-', 'amp-'))).to_dict()
        child = amp.to_dict()
        child['optim_wrapper'].pop('dtype')
        assert child == fp16
    a = amp.to_dict()
    p = plain.to_dict()
    for d in (a, p):
        d['optim_wrapper'].pop('type')
        d['optim_wrapper'].pop('loss_scale', None)
        d['optim_wrapper'].pop('dtype', None)
    assert a == p


def test_slide_variant_only_changes_testing():
    base = 'inline-swin-t-in1k-pre_upernet_8xb2-160k_ade20k-512x512'
    slide = _load(CONFIGS / 'inline_swin' / f'{base}-slide.py').to_dict()
    whole = _load(CONFIGS / 'inline_swin' / f'{base}.py').to_dict()
    assert slide['model'].pop('test_cfg') == dict(mode='slide', crop_size=(512, 512),
                                                  stride=(341, 341))
    whole['model'].pop('test_cfg')
    assert slide == whole


@pytest.mark.parametrize('name', [
    'inline_swin/inline-swin-t-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py',
    'inline_pvt/fpn_inline-pvt-t_4xb4-40k_ade20k-512x512.py',
    'inline_deit/inline-deit-t-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py',
    'inline_cswin/inline-cswin-t-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py',
])
def test_weight_decay_spares_what_the_recipe_spares(name):
    """UperNet: no decay on the backbone's norms and position tables; Semantic FPN (the lab's
    PVT recipe): decay on every parameter."""
    cfg = shrink(_load(CONFIGS / name))
    head = 'fpn' if name.startswith('inline_pvt/fpn_') else 'upernet'
    exempt = spec.no_decay_keys(spec.SEGMENTATION[head], cfg.model.backbone.type)
    keys = exempt - {'norm'}
    model = MODELS.build(cfg.model)
    optim = build_optim_wrapper(model, cfg.optim_wrapper)
    wd = cfg.optim_wrapper.optimizer.weight_decay
    decay = {id(p): g['weight_decay'] for g in optim.optimizer.param_groups for p in g['params']}
    no_decay, seen = (model.backbone.no_weight_decay() if exempt else set()), set()
    for name, p in model.backbone.named_parameters():
        assert decay[id(p)] == (0. if name in no_decay else wd), name
        seen.update(k for k in keys if k in name)
    assert seen == set(keys), 'a position-table key matches no parameter'
    qkv = [p for n, p in model.backbone.named_parameters() if n.endswith('qkv.weight')]
    assert qkv and all(decay[id(p)] == wd for p in qkv)


def test_sync_bn_heads_on_cpu():
    """What the Runner does to SyncBN in one process, and an explicit BN override."""
    cfg = shrink(_load(CONFIGS / 'inline_swin' /
                       'inline-swin-t-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py'))
    from mmengine.model import revert_sync_batchnorm
    model = revert_sync_batchnorm(MODELS.build(cfg.model))      # what the Runner does
    assert not any(isinstance(m, torch.nn.SyncBatchNorm) for m in model.modules())
    cfg.merge_from_dict({'model.decode_head.norm_cfg.type': 'BN',
                         'model.auxiliary_head.norm_cfg.type': 'BN'})
    model = MODELS.build(cfg.model)
    assert not any(isinstance(m, torch.nn.SyncBatchNorm) for m in model.modules())
    assert any(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())


def test_custom_template_heads_follow_the_classes():
    cfg = _load(CONFIGS / 'custom' / 'inline-swin-t-in1k-pre_upernet_1xb4-20k_custom-512x512.py')
    n = len(cfg.classes)
    assert cfg.num_classes == n
    assert cfg.model.decode_head.num_classes == cfg.model.auxiliary_head.num_classes == n
    ignore = cfg.ignore_index
    assert cfg.model.decode_head.ignore_index == cfg.model.auxiliary_head.ignore_index == ignore
    assert cfg.model.data_preprocessor.seg_pad_val == ignore
    for loader in (cfg.train_dataloader, cfg.val_dataloader):
        ds = loader.dataset
        assert ds.type == 'SegFolderDataset'
        assert ds.metainfo.classes == cfg.classes
        assert (ds.ignore_index, ds.reduce_zero_label) == (ignore, cfg.reduce_zero_label)
        assert ds.data_root == cfg.data_root
    assert cfg.val_evaluator.type == 'PaletteIoUMetric'
    assert cfg.val_evaluator.ignore_index == ignore
    assert cfg.train_dataloader.batch_size >= 2      # batch norm in the heads
    # data workers: 4, or as many as the machine has CPUs (torch warns above that)
    cpus = os.cpu_count() or 1
    assert cfg.train_dataloader.num_workers == min(4, cpus)
    assert cfg.val_dataloader.num_workers == min(2, cpus)
    predict = _load(CONFIGS / 'custom' /
                    'inline-swin-t-in1k-pre_upernet_1xb4-20k_custom-512x512_predict.py')
    assert predict.test_dataloader.dataset.with_masks is False
    assert predict.test_dataloader.dataset.data_prefix == dict(img_path='images/test')
    assert predict.test_evaluator.format_only is True
    assert not any(t.type == 'LoadAnnotations' for t in predict.test_dataloader.dataset.pipeline)
    assert predict.val_dataloader.dataset.get('with_masks', True) is True


@pytest.mark.parametrize('path', [p for p in SEG_CONFIGS if '_predict' not in p.name], ids=[
    p.name for p in SEG_CONFIGS if '_predict' not in p.name])
def test_masks_of_another_size_are_refused_by_default(path):
    """CheckSegMapSize directly after every LoadAnnotations (train, val, test): a mask
    whose size differs from its image's stops with an error naming both files, instead of
    being stretched over the image in training (mmseg's own pipelines do that silently)."""
    cfg = Config.fromfile(str(path))
    assert 'inline_mm.engine.enable' in cfg.custom_imports['imports']  # registers the step
    for split in ('train', 'val', 'test'):
        steps = [t['type'] for t in cfg[f'{split}_dataloader'].dataset.pipeline]
        assert steps[steps.index('LoadAnnotations') + 1] == 'CheckSegMapSize', (split, steps)
