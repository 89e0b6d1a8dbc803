"""The pipeline checks of inline_mm.engine.transforms, alone and in the shipped configs:
a bad sample stops where it is read, with its files named; samples without masks
(inference) pass untouched."""
from pathlib import Path

import numpy as np
import pytest
from mmengine.config import Config
from mmengine.runner import Runner
from PIL import Image

import inline_mm  # noqa: F401
from inline_mm.engine import CheckImageSize, CheckSegLabels, CheckSegMapSize
from inline_mm.datasets.toy.segmentation import make_folder_toy, save_index_png

from support import shrink_segmentor

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / 'configs/custom/inline-swin-t-in1k-pre_upernet_1xb4-20k_custom-512x512.py'
SEG_CONFIGS = sorted(p for p in (ROOT / 'configs').glob('*/*.py')
                     if p.parent.name != '_base_' and ('ade20k' in p.name
                                                       or 'cityscapes' in p.name)
                     or p.parent.name == 'custom' and 'custom-coco' not in p.name)


def _sample(mask=None, mask_path='m.png', hw=(6, 8), **extra):
    results = dict(img=np.zeros((*hw, 3), np.uint8), img_path='a.jpg', ori_shape=hw,
                   seg_map_path=mask_path, **extra)
    if mask is not None:
        results['gt_seg_map'] = mask
    return results


@pytest.mark.parametrize('step', [CheckSegMapSize(), CheckSegLabels(num_classes=3)])
def test_mask_checks_step_aside_without_a_mask(step):
    """Inference (mmseg's inferencers drop LoadAnnotations) and datasets without masks."""
    for results in (dict(img=np.zeros((6, 8, 3), np.uint8), img_path='a.jpg'),
                    _sample(mask_path=None)):
        assert step(dict(results)) == results


@pytest.mark.parametrize('step', [CheckSegMapSize(), CheckSegLabels(num_classes=3)])
def test_mask_checks_refuse_a_mask_path_without_a_loaded_mask(step):
    """Placed before LoadAnnotations: it would pass without looking, so it is refused."""
    with pytest.raises(KeyError, match='after LoadAnnotations') as err:
        step(_sample())
    assert 'a.jpg' in str(err.value) and 'm.png' in str(err.value)


def test_mask_size_check():
    ok = _sample(np.zeros((6, 8), np.uint8))
    assert CheckSegMapSize()(ok) is ok
    with pytest.raises(ValueError, match=r'mask m.png is 3x8 \(HxW\) but its image a.jpg is 6x8'):
        CheckSegMapSize()(_sample(np.zeros((3, 8), np.uint8)))


@pytest.mark.parametrize('dtype', [np.uint8, np.int64])
def test_label_check_accepts_classes_and_the_ignore_index(dtype):
    mask = np.array([[0, 1, 2, 255]], dtype)
    assert CheckSegLabels(num_classes=3)(_sample(mask, hw=(1, 4)))['gt_seg_map'] is mask
    assert CheckSegLabels(num_classes=4, ignore_index=3)(_sample(mask % 4, hw=(1, 4)))


@pytest.mark.parametrize('dtype', [np.uint8, np.int64])
def test_label_check_names_file_values_and_num_classes(dtype):
    mask = np.zeros((6, 8), dtype)
    mask[0, :3] = 7
    mask[1, 0] = 254
    with pytest.raises(ValueError) as err:
        CheckSegLabels(num_classes=3)(_sample(mask))
    message = str(err.value)
    assert message.startswith('mask m.png (image a.jpg) holds label values 7 (3 px), 254 (1 px)')
    assert 'num_classes=3 (labels 0..2)' in message and 'ignore_index=255' in message


def test_label_check_gives_file_values_under_reduce_zero_label():
    """After reduce_zero_label the labels are the file's values minus one."""
    mask = np.full((2, 2), 150, np.uint8)       # 151 in an ADE20K file
    with pytest.raises(ValueError, match=r'values 151 in the file: reduce_zero_label=True'):
        CheckSegLabels(num_classes=150)(_sample(mask, hw=(2, 2), reduce_zero_label=True))


@pytest.mark.parametrize('bad', [0, -1, 2.0, None, True])
def test_label_check_needs_a_class_count(bad):
    with pytest.raises(ValueError, match='num_classes must be a positive int'):
        CheckSegLabels(num_classes=bad)


def test_image_size_check_names_file_and_both_sizes():
    step = CheckImageSize()
    assert step(_sample(hw=(32, 40)))
    small = _sample(hw=(16, 2048))
    small['ori_shape'] = (12, 1536)
    with pytest.raises(ValueError) as err:
        step(small)
    message = str(err.value)
    assert message.startswith('image a.jpg is 12x1536 (HxW) and the pipeline makes it 16x2048')
    assert 'smaller than 32 px' in message
    unchanged = _sample(hw=(8, 80))
    unchanged.pop('img_path')
    with pytest.raises(ValueError, match=r'the image \(given as an array\) is 8x80 \(HxW\):'):
        step(unchanged)
    assert CheckImageSize(min_size=8)(_sample(hw=(8, 80)))


@pytest.mark.parametrize('path', [p for p in SEG_CONFIGS if '_predict' not in p.name],
                         ids=lambda p: p.name)
def test_shipped_configs_check_labels_against_their_heads(path):
    """Every LoadAnnotations is followed by CheckSegMapSize and CheckSegLabels with the
    decode head's classes and ignore index; every test pipeline checks image sizes."""
    cfg = Config.fromfile(str(path))
    head = cfg.model.decode_head
    for split in ('train', 'val', 'test'):
        pipeline = cfg[f'{split}_dataloader'].dataset.pipeline
        steps = [t['type'] for t in pipeline]
        at = steps.index('LoadAnnotations')
        assert steps[at + 1:at + 3] == ['CheckSegMapSize', 'CheckSegLabels'], (split, steps)
        labels = pipeline[at + 2]
        assert labels['num_classes'] == head.num_classes
        assert labels.get('ignore_index', 255) == head.get('ignore_index', 255)
        if split != 'train':
            assert steps.index('CheckImageSize') == steps.index('Resize') + 1


def test_predict_template_checks_image_sizes():
    cfg = Config.fromfile(str(TEMPLATE).replace('.py', '_predict.py'))
    steps = [t['type'] for t in cfg.test_dataloader.dataset.pipeline]
    assert steps == ['LoadImageFromFile', 'Resize', 'CheckImageSize', 'PackSegInputs']


@pytest.fixture
def own_data(tmp_path):
    """The own-data layout (4 classes) with a small region of label 7 in one training
    mask: too small for the loss to meet it in every crop."""
    root = tmp_path / 'data'
    make_folder_toy(str(root), num_train=4, num_val=2, size=64)
    mask = root / 'masks/train/train_0002.png'
    index = np.array(Image.open(mask))
    index[:3, :3] = 7
    save_index_png(str(mask), index)
    return root, mask


def _template_run(root: Path, work_dir: Path) -> Config:
    cfg = Config.fromfile(str(TEMPLATE))
    shrink_segmentor(cfg)
    cfg.merge_from_dict({
        'work_dir': str(work_dir), 'train_cfg.max_iters': 4, 'train_cfg.val_interval': 100,
        'default_hooks.checkpoint.interval': 1, 'default_hooks.logger.interval': 1})
    for loader in ('train_dataloader', 'val_dataloader'):
        cfg[loader].update(num_workers=0, persistent_workers=False)
        cfg[loader].dataset.data_root = str(root)
    cfg.train_dataloader.batch_size = 2
    cfg.train_dataloader.sampler.shuffle = False
    for step in cfg.train_dataloader.dataset.pipeline:      # the shipped steps, smaller
        if step.type == 'RandomResize':
            step.scale = (128, 64)
        elif step.type == 'RandomCrop':
            step.crop_size = (64, 64)
    return cfg


def test_template_stops_training_at_the_mask_with_a_foreign_label(own_data, tmp_path):
    root, mask = own_data
    runner = Runner.from_cfg(_template_run(root, tmp_path / 'work'))
    with pytest.raises(ValueError) as err:
        runner.train()
    message = str(err.value)
    assert f'mask {mask} ' in message and 'train_0002' in message
    assert 'label values 7 (9 px)' in message and 'num_classes=4' in message
    assert runner.iter == 1                  # the first batch trained; the second has the mask
    assert not list((tmp_path / 'work').glob('iter_2.pth'))


# ------------------------------------------------------------------ COCO classes
@pytest.fixture(scope='module')
def coco(tmp_path_factory):
    from inline_mm.datasets.toy.coco import make_coco_toy
    root = tmp_path_factory.mktemp('coco')
    make_coco_toy(str(root), num_train=6, num_val=2, size=64, max_objects=3)
    return root


def _coco_loader(root: Path, classes, test_mode=False):
    det = Config.fromfile(str(ROOT / 'configs/inline_swin/mask-rcnn_inline-swin-t_fpn_1x_coco.py'))
    from mmengine.registry import DefaultScope
    ds = det.train_dataloader.dataset
    ds.update(data_root=str(root), ann_file='annotations/instances_train2017.json',
              data_prefix=dict(img='train2017/'), metainfo=dict(classes=classes),
              test_mode=test_mode)
    with DefaultScope.overwrite_default_scope('mmdet'):
        return Runner.build_dataloader(dict(batch_size=1, num_workers=0, dataset=ds,
                                            sampler=dict(type='DefaultSampler', shuffle=False)))


def test_coco_class_that_names_no_category_is_refused(coco):
    with pytest.raises(ValueError) as err:
        _coco_loader(coco, ('circle', 'triangel', 'rectangle'))
    message = str(err.value)
    assert "['triangel'] of the config's classes are not category names of" in message
    assert 'instances_train2017.json' in message and "'triangel' -> 'triangle'?" in message


@pytest.fixture
def logged(monkeypatch):
    """The messages of mmengine's current logger while the test runs."""
    from mmengine.logging import MMLogger
    logger = MMLogger.get_instance('inline_mm_test_logged', log_level='INFO')
    lines = []
    logger.addFilter(lambda record: lines.append(record.getMessage()) or True)
    monkeypatch.setattr(MMLogger, 'get_current_instance', classmethod(lambda cls: logger))
    return lines


def test_coco_subset_of_the_categories_trains_and_says_what_it_skips(coco, logged):
    lines = logged
    loader = _coco_loader(coco, ('circle', 'rectangle'))
    assert len(loader.dataset) > 0
    labels = {int(i['bbox_label']) for d in loader.dataset.data_list for i in d['instances']}
    assert labels <= {0, 1}
    skipped = [line for line in lines if 'not in metainfo.classes are not trained on' in line]
    assert len(skipped) == 1 and 'of 1 category id(s)' in skipped[0], lines


def test_coco_classes_naming_no_category_only_warn_outside_training(coco, logged):
    """Evaluation and analysis tools may point a COCO config at a stand-in set."""
    lines = logged
    loader = _coco_loader(coco, ('circle', 'triangel', 'rectangle'), test_mode=True)
    assert len(loader.dataset) > 0
    assert any("['triangel'] of the config's classes" in line for line in lines), lines
