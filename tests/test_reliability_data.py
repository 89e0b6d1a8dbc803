"""Bad training data through the real loading pipelines of the shipped configs: what
mmdet/mmseg do on their own, and the clear errors inline_mm adds where they fail late,
unclearly or silently (inline_mm/engine/data_checks.py, with the rules of inline_mm/datasets/:
problems.py's records (code, path, message), printed 'path: message')."""
import copy
import json

import cv2
import numpy as np
import pytest
from mmengine.config import Config
from mmengine.registry import init_default_scope
from mmengine.runner import Runner
from PIL import Image

import inline_mm  # noqa: F401
from inline_mm.engine import check_coco
from inline_mm.datasets.toy.segmentation import save_index_png
from reliability_support import SHIPPED, hook_checked_runner, tiny_config, toy_ade, toy_coco

CLASSES = ('circle', 'triangle', 'rectangle')


@pytest.fixture(scope='module')
def coco(tmp_path_factory):
    return toy_coco(tmp_path_factory.mktemp('coco'), num_train=4)


@pytest.fixture(scope='module')
def det_cfg():
    return Config.fromfile(str(SHIPPED['mask_rcnn']))


def _coco_dataset_cfg(det_cfg, root, ann_file):
    ds = copy.deepcopy(det_cfg.train_dataloader.dataset)
    ds.update(data_root=str(root), ann_file=str(ann_file), metainfo=dict(classes=CLASSES))
    return ds


def _edit_coco(root, tmp_path, edit) -> str:
    ann = json.loads((root / 'annotations/instances_train2017.json').read_text())
    edit(ann)
    path = tmp_path / 'instances.json'
    path.write_text(json.dumps(ann))
    return str(path)


def test_grayscale_and_rgba_images_become_rgb(coco, det_cfg, tmp_path):
    """The shipped train pipeline (LoadImageFromFile, color_type='color') decodes a
    grayscale JPEG and an RGBA PNG as 3 channels; the model trains on them."""
    from mmdet.registry import DATASETS, MODELS
    init_default_scope('mmdet')
    img_dir = tmp_path / 'train2017'
    img_dir.mkdir()
    src = cv2.imread(str(coco / 'train2017/000000.jpg'))
    cv2.imwrite(str(img_dir / 'gray.jpg'), cv2.cvtColor(src, cv2.COLOR_BGR2GRAY))
    alpha = np.full(src.shape[:2] + (1,), 100, np.uint8)
    Image.fromarray(np.concatenate([src[..., ::-1], alpha], -1), 'RGBA').save(img_dir / 'rgba.png')
    assert Image.open(img_dir / 'gray.jpg').mode == 'L'
    assert Image.open(img_dir / 'rgba.png').mode == 'RGBA'

    def use_them(ann):
        ann['images'][0]['file_name'] = 'gray.jpg'
        ann['images'][1]['file_name'] = 'rgba.png'
    ann_file = _edit_coco(coco, tmp_path, use_them)
    ds_cfg = _coco_dataset_cfg(det_cfg, tmp_path, ann_file)
    # the shipped pipeline, its multi-scale + crop step replaced by one small resize
    at = [t['type'] for t in ds_cfg.pipeline].index('RandomChoice')
    ds_cfg.pipeline[at] = dict(type='Resize', scale=(128, 96), keep_ratio=True)
    dataset = DATASETS.build(ds_cfg)
    batch = [dataset[i] for i in range(2)]
    assert {b['data_samples'].img_path.rsplit('/', 1)[1] for b in batch} == {'gray.jpg', 'rgba.png'}
    assert all(b['inputs'].shape[0] == 3 for b in batch)

    body = Config.fromfile(str(tiny_config(tmp_path, 'mask_rcnn', body='mask_rcnn')))
    model = MODELS.build(body.model)
    data = dict(inputs=[b['inputs'] for b in batch],
                data_samples=[b['data_samples'] for b in batch])
    data = model.data_preprocessor(data, True)
    losses = model.loss(data['inputs'], data['data_samples'])
    assert all(np.isfinite(float(sum(v) if isinstance(v, list) else v))
               for k, v in losses.items() if 'loss' in k)


def test_coco_without_annotations_says_why_it_is_empty(coco, det_cfg, tmp_path):
    def drop(ann):
        ann['annotations'] = []
    ann_file = _edit_coco(coco, tmp_path, drop)
    loader = copy.deepcopy(det_cfg.train_dataloader)
    loader.update(num_workers=0, persistent_workers=False,
                  dataset=_coco_dataset_cfg(det_cfg, coco, ann_file))
    init_default_scope('mmdet')
    with pytest.raises(ValueError) as err:
        Runner.build_dataloader(loader.to_dict())
    message = str(err.value)
    # mmengine alone: "need at least one array to concatenate"
    assert 'need at least one array' not in message
    assert 'has no samples' in message and ann_file in message
    assert '4 images and 0 annotations' in message
    assert 'filter_empty_gt' in message


def test_empty_segmentation_folder_says_where_it_looked(tmp_path):
    """*stock*: ValueError: need at least one array to concatenate."""
    cfg = Config.fromfile(str(SHIPPED['upernet']))
    (tmp_path / 'images/training').mkdir(parents=True)
    (tmp_path / 'annotations/training').mkdir(parents=True)
    loader = cfg.train_dataloader.to_dict()
    loader['dataset']['data_root'] = str(tmp_path)
    # Inside a RepeatDataset, as long schedules often wrap their data.
    loader.update(num_workers=0, persistent_workers=False,
                  dataset=dict(type='RepeatDataset', times=2, dataset=loader['dataset']))
    init_default_scope('mmseg')
    with pytest.raises(ValueError) as err:
        Runner.build_dataloader(loader)
    message = str(err.value)
    assert 'ADE20KDataset has no samples: nothing was found under' in message
    assert str(tmp_path) in message and 'images/training' in message


def test_check_coco_reports_missing_images_and_bad_ids(coco, tmp_path):
    def damage(ann):
        ann['images'][1]['file_name'] = 'gone.jpg'
        ann['annotations'][0]['category_id'] = 99
        ann['annotations'][1]['image_id'] = 12345
    ann_file = _edit_coco(coco, tmp_path, damage)
    report = check_coco(ann_file, str(coco / 'train2017'))
    problems = '\n'.join(str(p) for p in report['problems'])
    assert f'{coco / "train2017" / "gone.jpg"}: image file not found' in problems
    assert '1 annotation(s) have a category_id' in problems
    assert '1 annotation(s) refer to image ids' in problems
    good = check_coco(str(coco / 'annotations/instances_train2017.json'), str(coco / 'train2017'))
    assert good['problems'] == [] and good['images'] == 4


def test_missing_image_found_before_the_first_iteration(coco, tmp_path):
    """Without the hook mmdet raises FileNotFoundError when a data worker reaches the
    file (maybe hours in); DatasetCheckHook lists every missing file before iteration 1."""
    def damage(ann):
        ann['images'][2]['file_name'] = 'gone.jpg'
        ann['images'][3]['file_name'] = 'lost.jpg'
    ann_file = _edit_coco(coco, tmp_path, damage)
    cfg = Config.fromfile(str(tiny_config(
        tmp_path, 'mask_rcnn', body='mask_rcnn',
        extra="custom_hooks = [dict(type='DatasetCheckHook')]\n")))
    cfg.work_dir = str(tmp_path / 'work')
    cfg.train_dataloader.dataset.update(data_root=str(coco), ann_file=ann_file)
    runner = Runner.from_cfg(cfg)
    with pytest.raises(FileNotFoundError) as err:
        runner.train()
    message = str(err.value)
    assert '2 problem(s)' in message
    assert str(coco / 'train2017' / 'gone.jpg') in message
    assert str(coco / 'train2017' / 'lost.jpg') in message
    assert runner.iter == 0 and not list((tmp_path / 'work').glob('iter_*.pth'))


# ------------------------------------------------------------------ segmentation masks
@pytest.fixture
def ade_bad_mask(tmp_path):
    """Toy ADE set whose first training mask is half the size of its image."""
    root = toy_ade(tmp_path / 'ade', num_train=4, size=64)
    mask = root / 'annotations/training/ADE_train_00000001.png'
    m = np.array(Image.open(mask))
    save_index_png(str(mask), m[:m.shape[0] // 2, :m.shape[1] // 2])
    return root, mask


def _seg_dataset(root, pipeline_edit=None):
    from mmseg.registry import DATASETS
    cfg = Config.fromfile(str(SHIPPED['upernet']))
    init_default_scope('mmseg')
    ds = copy.deepcopy(cfg.train_dataloader.dataset)
    ds.data_root = str(root)
    steps = [t['type'] for t in ds.pipeline]
    ds.pipeline[steps.index('RandomResize')]['scale'] = (128, 64)   # the shipped one, smaller
    ds.pipeline[steps.index('RandomCrop')]['crop_size'] = (64, 64)
    if pipeline_edit:
        pipeline_edit(ds.pipeline)
    return DATASETS.build(ds)


def _stock_mmseg_pipeline(pipeline):
    """The pipeline as mmseg's ADE20K base has it: without inline_mm's check."""
    pipeline[:] = [t for t in pipeline if t['type'] != 'CheckSegMapSize']


def test_wrong_size_mask_is_silent_in_stock_mmseg(ade_bad_mask):
    """Documents the hazard: mmseg's pipeline rescales image and mask into one box, so a
    half-size mask is stretched over its image without any error."""
    root, _ = ade_bad_mask
    sample = _seg_dataset(root, _stock_mmseg_pipeline)[0]
    assert sample['data_samples'].seg_map_path.endswith('ADE_train_00000001.png')
    assert sample['inputs'].shape[1:] == sample['data_samples'].gt_sem_seg.data.shape[1:]


def test_shipped_pipeline_refuses_wrong_size_mask(ade_bad_mask):
    """The shipped configs have CheckSegMapSize after LoadAnnotations (by default)."""
    root, mask = ade_bad_mask
    dataset = _seg_dataset(root)
    with pytest.raises(ValueError) as err:
        dataset[0]
    message = str(err.value)
    assert str(mask) in message and 'ADE_train_00000001.jpg' in message
    h, w = Image.open(str(mask).replace('annotations', 'images').replace('.png', '.jpg')).size[::-1]
    assert f'is {h // 2}x{w // 2} (HxW)' in message and f'is {h}x{w}' in message
    assert dataset[1]['inputs'].shape[0] == 3           # good pairs pass untouched


def test_dataset_check_hook_lists_wrong_size_masks(ade_bad_mask, tmp_path):
    root, mask = ade_bad_mask
    runner = hook_checked_runner(tmp_path, root)
    with pytest.raises(ValueError) as err:
        runner.train()
    message = str(err.value)
    assert '1 problem(s)' in message and f'{mask}: mask is' in message
    assert runner.iter == 0


def test_dataset_check_hook_rejects_unknown_split():
    from inline_mm.engine import DatasetCheckHook
    with pytest.raises(ValueError, match="unknown split"):
        DatasetCheckHook(splits=('train', 'validation'))
