"""The Cityscapes recipes (UperNet with InLine-Swin-T/S/B, Semantic FPN with InLine-PVT-T/S,
512x1024 crops, 80k iterations, whole-image 1024x2048 inference, a sliding-window child):
each follows its recipe, and the T configs train one iteration, validate (whole images)
and test (sliding windows) on a toy set in Cityscapes' layout through mmengine's Runner.
The stock inferencers run the T configs in tests/test_inferencers.py.
"""
import copy
import functools
import re
from pathlib import Path

import pytest
from mmengine.config import Config
from mmengine.runner import Runner

import config_spec as spec
from support import on_toy_seg, out_channels, shrink_segmentor
from inline_mm.datasets.toy.segmentation import make_cityscapes_toy

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / 'configs'
SWIN_T = 'inline_swin/inline-swin-t-in1k-pre_upernet_4xb2-80k_cityscapes-512x1024.py'
PVT_T = 'inline_pvt/fpn_inline-pvt-t_4xb2-80k_cityscapes-512x1024.py'
SHIPPED = sorted(str(p.relative_to(CONFIGS)) for p in CONFIGS.glob('inline_*/*cityscapes*.py'))
# the -slide child tests differently, the -fsdp- one trains sharded (tests/test_fsdp.py): the
# same recipe
RECIPES = [n for n in SHIPPED if not n.endswith('-slide.py') and '-fsdp-' not in n]
FSDP = 'inline_swin/inline-swin-b-in1k-pre_upernet_4xb2-fsdp-80k_cityscapes-512x1024.py'


@functools.lru_cache(maxsize=None)
def _parse(name: str) -> Config:
    return Config.fromfile(str(CONFIGS / name))


def _load(name: str) -> Config:
    return copy.deepcopy(_parse(name))


def test_every_recipe_has_its_config():
    expected = [f'inline_swin/inline-swin-{v}-in1k-pre_upernet_4xb2-80k_cityscapes-512x1024.py'
                for v in 'tsb']
    expected += [f'inline_pvt/fpn_inline-pvt-{v}_4xb2-80k_cityscapes-512x1024.py' for v in 'ts']
    assert sorted(RECIPES) == sorted(expected)
    assert SHIPPED == sorted(expected + [SWIN_T.replace('.py', '-slide.py'), FSDP])


@pytest.mark.parametrize('name', RECIPES)
def test_recipe(name):
    cfg = _load(name)
    city = spec.CITYSCAPES
    head = 'upernet' if '_upernet_' in name else 'fpn'
    recipe = spec.values(spec.SEGMENTATION[head])
    variant = re.search(r'inline-([a-z]+-[a-z])[_-]', name).group(1)
    cls, arch = spec.BACKBONES[variant]
    bb = cfg.model.backbone
    assert (bb.type, bb.arch, bb.drop_path_rate) == \
        (cls, arch, spec.DROP_PATH[head, spec.schedule(name)][variant].value)
    assert bb.init_cfg.checkpoint == f"inline://{variant.replace('-', '_')}"
    chans = out_channels(bb)
    assert cfg.model.decode_head.num_classes == city['num_classes']
    if head == 'upernet':
        assert cfg.model.decode_head.in_channels == chans
        assert (cfg.model.auxiliary_head.in_channels, cfg.model.auxiliary_head.num_classes) \
            == (chans[2], city['num_classes'])
    else:
        assert cfg.model.neck.in_channels == chans
    # the head's ADE20K recipe (optimiser, schedule shape, heads) over 80k iterations
    spec.check_segmentation(cfg, recipe, cls, city['max_iters'])
    gpus, per_gpu = map(int, re.search(r'_(\d+)xb(\d+)-', name).groups())
    assert (gpus, per_gpu, cfg.train_dataloader.batch_size) == \
        (city['gpus'], city['batch_size'], city['batch_size'])
    crop = [t for t in cfg.train_dataloader.dataset.pipeline if t.type == 'RandomCrop']
    assert crop[0].crop_size == city['crop_size'] == cfg.model.data_preprocessor.size
    # whole 1024x2048 images at test time
    assert cfg.model.test_cfg == dict(mode='whole')
    resize = [t for t in cfg.test_dataloader.dataset.pipeline if t.type == 'Resize']
    assert resize[0].scale == city['test_scale'] and resize[0].keep_ratio
    assert cfg.train_dataloader.dataset.type == 'CityscapesDataset'


def test_slide_child_only_changes_testing():
    slide = _load(SWIN_T.replace('.py', '-slide.py')).to_dict()
    whole = _load(SWIN_T).to_dict()
    assert slide['model'].pop('test_cfg') == dict(mode='slide', crop_size=(512, 1024),
                                                  stride=(341, 683))
    whole['model'].pop('test_cfg')
    assert slide == whole


@pytest.fixture(scope='module')
def cityscapes(tmp_path_factory):
    data = tmp_path_factory.mktemp('toy_cityscapes')
    make_cityscapes_toy(str(data), num_train=2, num_val=2, size=64)
    return data


@pytest.mark.parametrize('name', [SWIN_T, PVT_T])
def test_trains_validates_and_tests_with_sliding_windows_on_toy_cityscapes(
        name, cityscapes, tmp_path):
    cfg = on_toy_seg(shrink_segmentor(_load(name)), cityscapes)
    cfg.work_dir = str(tmp_path / 'train')
    runner = Runner.from_cfg(cfg)
    runner.train()                                     # one iteration, whole-image validation
    assert runner.iter == 1
    miou = runner.message_hub.get_scalar('val/mIoU').current()
    assert 0 <= miou <= 100
    checkpoint = tmp_path / 'train' / 'iter_1.pth'
    # the same weights tested as the slide child tests them, in windows over each image
    slide = on_toy_seg(shrink_segmentor(_load(SWIN_T.replace('.py', '-slide.py'))),
                       cityscapes) if name == SWIN_T else cfg
    slide.model.test_cfg = dict(mode='slide', crop_size=(64, 128), stride=(43, 85))
    slide.work_dir, slide.load_from = str(tmp_path / 'test'), str(checkpoint)
    metrics = Runner.from_cfg(slide).test()
    assert 0 <= metrics['mIoU'] <= 100


@pytest.mark.subprocess
def test_toy_cityscapes_command_as_documented(tmp_path):
    """docs/segmentation.md's command writes a set that mmseg's CityscapesDataset reads, with
    Cityscapes' train ids (and 255, ignored)."""
    import subprocess
    import sys

    import numpy as np
    from mmseg.datasets import CityscapesDataset

    from support import subprocess_env
    text = (ROOT / 'docs' / 'segmentation.md').read_text()
    command = re.search(r'`(python tools/misc/make_toy_dataset\.py cityscapes (\S+))`', text)
    argv = command.group(1).split()
    argv[0], argv[1] = sys.executable, str(ROOT / argv[1])
    subprocess.run(argv, cwd=tmp_path, env=subprocess_env(), check=True, timeout=300,
                   capture_output=True)
    root = tmp_path / command.group(2)
    for split, count in (('train', 12), ('val', 4)):
        ds = CityscapesDataset(data_root=str(root), pipeline=[],
                               data_prefix=dict(img_path=f'leftImg8bit/{split}',
                                                seg_map_path=f'gtFine/{split}'))
        assert len(ds) == count
    from PIL import Image
    labels = np.unique(np.array(Image.open(ds[0]['seg_map_path'])))
    assert set(labels.tolist()) <= {0, 8, 11, 13, 255} and 0 in labels
