"""Own instance data (docs/own_instances.md): the page's commands in document order on the toy
export, the COCO checks one rule at a time, the converters, and the templates' wiring.

The walkthrough runs every command of the page as written, in a scratch folder laid out like
the repository, with the page's rehearsal edits and a narrower InLine-Swin-T (as the
segmentation walkthrough in tests/test_readme.py does): the checker must name the planted
defects and exit 1, the fixer's copies must pass it (and the rotated photos' masks must lie on
their shapes), training on them must lower the loss and report real COCO box and mask mAP,
testing must reproduce the val figures, and predicting a folder must write one results json
with the training file's category ids and one overlay PNG per image, in the run's folder.
"""
import json
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from test_readme import (ROOT, assert_walkthrough_runs, commands, edit_if_copied, page, shell,
                         with_best_checkpoint, workspace)
from test_readme import apply_edits as apply_walkthrough_edits
from test_readme import rehearsal_edits as walkthrough_edits

TEMPLATE = ROOT / 'configs/custom/mask-rcnn_inline-swin-t_fpn_1xb4-36e_custom-coco.py'
#: the page's stand-in for the best checkpoint training writes
BEST = 'work_dirs/my_instances/best_coco_segm_mAP_epoch_N.pth'
REHEARSAL_INTRO = 'To rehearse on the toy export'
#: Test only, appended to the user's config after the page's edits: a narrower model, so that
#: the run fits the suite's budget. Schedule, data, heads and recipe stay the template's.
NARROW = """
model['backbone'].update(embed_dims=16, depths=(1, 1, 1, 1), num_heads=(1, 1, 2, 2))
model['neck'].update(in_channels=[16, 32, 64, 128], out_channels=32)
model['rpn_head'].update(in_channels=32, feat_channels=32)
model['roi_head'].update(
    bbox_roi_extractor=dict(out_channels=32, roi_layer=dict(sampling_ratio=2)),
    mask_roi_extractor=dict(out_channels=32, roi_layer=dict(sampling_ratio=2)))
model['roi_head']['bbox_head'].update(in_channels=32, fc_out_channels=128)
model['roi_head']['mask_head'].update(in_channels=32, conv_out_channels=32)
model['train_cfg'] = dict(rpn_proposal=dict(nms_pre=500, max_per_img=200),
                          rcnn=dict(sampler=dict(num=64)))
model['test_cfg'] = dict(rpn=dict(nms_pre=300, max_per_img=100))
"""


def rehearsal_edits(text: str) -> list:
    return walkthrough_edits(text, REHEARSAL_INTRO)


def apply_edits(config: Path, edits: list):
    apply_walkthrough_edits(config, edits, NARROW)


def logged(log: str, key: str) -> list:
    return [float(v) for v in re.findall(
        rf'Epoch\(train\).*?\s{re.escape(key)}: ([\d.]+(?:e[-+]?\d+)?)', log)]


def _metric(log: str, key: str) -> float:
    return float(re.findall(rf'coco/{key}: (-?[\d.]+)', log)[-1])


@pytest.mark.subprocess
@pytest.mark.slow
def test_own_instances_walkthrough_as_written(tmp_path, monkeypatch):
    text = page('own_instances')
    steps = commands(text)
    edits = rehearsal_edits(text)
    ws = workspace(tmp_path)
    data = ws / 'data' / 'my_coco'
    logs, best, fixed = [], [], False
    for cmd in steps:
        if cmd.startswith(('bash tools/dist_train.sh', 'mim ', 'INLINE_MM_DATA=')) or \
                cmd.endswith(' --resume'):
            continue        # alternatives named in prose: their lines parse (test_readme.py)
        cmd = with_best_checkpoint(cmd, ws, BEST, best)
        expect_fail = (cmd.startswith('python tools/misc/check_dataset.py data/my_coco/'
                                      'annotations/train.json') and not fixed)
        logs.append((cmd, shell_rc(cmd, ws, 1 if expect_fail else 0)))
        fixed = fixed or 'coco_fix.py' in cmd
        edit_if_copied(cmd, ws / 'configs' / 'my_instances.py', edits, NARROW)
    assert_walkthrough_runs(steps, (
        'make_toy_dataset.py coco-export', 'labelme2coco.py', 'coco_fix.py',
        'check_dataset.py --config', 'tools/train.py', 'images2coco.py',
        'configs/my_instances_predict.py'))

    def log(start: str, last: bool = False) -> str:
        found = [out for cmd, out in logs if cmd.startswith(start)]
        assert found, f'no command starting {start!r} ran'
        return found[-1 if last else 0]

    first = log('python tools/misc/check_dataset.py data/my_coco/annotations/train')
    for code, name in (('exif-rotation', '0003'), ('exif-rotation', '0006'),
                       ('truncated', '0007'), ('undeclared-category', '0002'),
                       ('polygon', '0004')):
        assert re.search(rf'ERROR +\[{code}\] .*train/{name}\.jpg', first), (code, first)
    assert re.search(r'0003\.jpg: .*fit the stored pixels, .*--turn-annotations', first)
    assert re.search(r'0006\.jpg: .*fit the turned photo, .*--fix-sizes', first)
    assert re.search(r'WARNING \[box-partly-outside\] .*train/0008\.jpg.*--clip-boxes', first)
    assert 'empty-images' in first and re.search(r'\n +0 +3 +circle', first), first
    assert 'coco_fix.py data/my_coco/annotations/train.json' in first
    fix = log('python tools/dataset_converters/coco_fix.py data/my_coco/annotations/train_')
    assert 'OK: train.json passes the check' in fix, fix
    assert 'OK: train.json looks fine' in log('python tools/misc/check_dataset.py '
                                              'data/my_coco/annotations/train', last=True)
    assert 'OK: val.json looks fine' in log('python tools/misc/check_dataset.py '
                                            'data/my_coco/annotations/val', last=True)
    assert_masks_on_shapes(data / 'annotations' / 'train.json', data / 'images',
                           ('train/0003.jpg', 'train/0006.jpg'))
    labelme = log('python tools/dataset_converters/labelme2coco.py')
    assert 'classes: circle, rectangle, triangle' in labelme
    check = log('python tools/misc/check_dataset.py --config')
    assert 'OK: train.json, val.json' in check, check

    train = log('python tools/train.py')
    assert 'DatasetCheckHook: train, val: checked' in train, train[-3000:]
    losses = logged(train, 'loss')
    assert len(losses) >= 5, train[-3000:]
    assert np.mean(losses[-2:]) < 0.8 * np.mean(losses[:2]), f'loss did not fall: {losses}'
    box, mask = _metric(train, 'bbox_mAP'), _metric(train, 'segm_mAP')
    assert 0 <= box <= 1 and 0 <= mask <= 1
    assert _metric(train, 'bbox_mAP_50') > 0, 'no box found at IoU 0.5 after training'
    assert re.search(r'\|\s+triangle\s+\|', train), 'no per-class table'

    test = log('python tools/test.py configs/my_instances.py')
    assert _metric(test, 'segm_mAP') == pytest.approx(mask, abs=1e-3)
    assert _metric(test, 'bbox_mAP') == pytest.approx(box, abs=1e-3)

    runs = sorted((ws / 'work_dirs' / 'my_instances_predict').glob('*/predictions'))
    assert len(runs) == 1, runs
    out = runs[0]
    results = json.loads((out / 'results.segm.json').read_text())
    predict = json.loads((data / 'annotations' / 'predict.json').read_text())
    assert predict['annotations'] == [] and {c['id'] for c in predict['categories']} == {3, 7, 12}
    assert results and {r['category_id'] for r in results} <= {3, 7, 12}
    assert {r['image_id'] for r in results} <= {im['id'] for im in predict['images']}
    assert all('counts' in r['segmentation'] and len(r['bbox']) == 4 for r in results)
    pngs = sorted(p.stem for p in (out / 'overlays').glob('*.png'))
    assert pngs == sorted(Path(im['file_name']).stem for im in predict['images'])
    overlay = Image.open(out / 'overlays' / f'{pngs[0]}.png')
    source = Image.open(data / 'images' / 'predict' / f'{pngs[0]}.jpg')
    assert overlay.size == source.size

    # the page's DetInferencer lines, as written, in the same folder
    snippet = re.search(r'```python\n(from mmdet.apis import DetInferencer.*?)```', text, re.S)
    assert snippet, 'the page lost its DetInferencer example'
    monkeypatch.chdir(ws)
    exec(with_best_checkpoint(snippet[1], ws, BEST, best), {})
    preds = sorted((ws / 'work_dirs' / 'inferencer' / 'preds').glob('*.json'))
    assert [p.stem for p in preds] == pngs
    assert len(list((ws / 'work_dirs' / 'inferencer' / 'vis').iterdir())) == len(pngs)
    assert json.loads(preds[0].read_text())['labels'] is not None


@pytest.mark.subprocess
def test_a_distributed_run_stops_on_every_rank_before_training(tmp_path):
    """tools/dist_train.sh with the template on the toy export as exported: both ranks stop
    before the first iteration with the same complete list (the image checks are shared),
    before the model's weights load (here an offline download, which would fail)."""
    from support import free_port, subprocess_env
    from inline_mm.datasets.toy.exports import make_coco_export
    import subprocess
    import sys
    make_coco_export(str(tmp_path / 'data'), num_train=10, num_val=2, size=64)
    config = tmp_path / 'my_instances.py'
    config.write_text(TEMPLATE.read_text())
    apply_edits(config, rehearsal_edits(page('own_instances')))
    config.write_text(config.read_text().replace('pretrained = None',
                                                 "pretrained = 'inline://swin_t'"))
    env = subprocess_env(PORT=str(free_port()), PYTHON=sys.executable,
                         INLINE_MM_DATA=str(tmp_path / 'data'), INLINE_MM_OFFLINE='1')
    out = subprocess.run(['bash', 'tools/dist_train.sh', str(config), '2', '--work-dir',
                          str(tmp_path / 'wd')], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    log = out.stdout + out.stderr
    assert out.returncode != 0 and 'Distributed training: True' in log, log[-3000:]
    errors = re.findall(r'DatasetCheckHook: (\d+) problem\(s\)', log)
    assert errors and len(set(errors)) == 1 and int(errors[0]) >= 5, log[-3000:]
    for name in ('0002', '0003', '0004', '0006', '0007'):
        assert f'train/{name}.jpg' in log, name
    assert '2 ranks' not in log and 'Epoch(train)' not in log
    assert 'downloads are off' not in log and 'WeightsError' not in log


def assert_masks_on_shapes(ann_file: Path, img_dir: Path, names):
    """Each annotation of these images, rasterised at the json's size, lies on its shape in
    the image as training loads it (EXIF turn applied): the mean colour under the mask is far
    from the mean colour of a ring of background just around it (a mask beside its shape
    would see the background on both sides)."""
    import cv2
    import mmcv
    from pycocotools import mask as mask_utils
    coco = json.loads(ann_file.read_text())
    for name in names:
        im = next(i for i in coco['images'] if i['file_name'] == name)
        img = mmcv.imread(str(img_dir / name)).astype(float)
        h, w = im['height'], im['width']
        assert img.shape[:2] == (h, w), (name, img.shape, h, w)
        anns = [a for a in coco['annotations'] if a['image_id'] == im['id']]
        assert anns, name
        for a in anns:
            segm = a['segmentation']
            rle = mask_utils.merge(mask_utils.frPyObjects(segm, h, w)) \
                if isinstance(segm, list) else dict(segm, counts=segm['counts'].encode())
            inside = mask_utils.decode(rle).astype(bool)
            ring = cv2.dilate(inside.astype(np.uint8), np.ones((7, 7), np.uint8)).astype(bool)
            ring &= ~inside
            gap = np.linalg.norm(img[inside].mean(0) - img[ring].mean(0))
            assert gap > 50, (name, a['id'], gap)


def shell_rc(cmd: str, cwd: Path, rc: int) -> str:
    """:func:`shell`, but a command may be expected to fail (exit status ``rc``)."""
    if rc == 0:
        return shell(cmd, cwd)
    import os
    import subprocess
    env = dict(os.environ, OMP_NUM_THREADS='1', PYTHONUNBUFFERED='1')
    env['PATH'] = f'{cwd.parent / "bin"}{os.pathsep}{env["PATH"]}'
    env['PYTHONPATH'] = str(ROOT) + os.pathsep + env.get('PYTHONPATH', '')
    proc = subprocess.run(['bash', '-c', cmd], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == rc, f'$ {cmd}\nexit {proc.returncode}, expected {rc}\n{out[-4000:]}'
    return out


# ----------------------------------------------------------------- the COCO rules, one by one
def _jpeg(path: Path, h: int, w: int, orientation: int = 0, cut: bool = False):
    path.parent.mkdir(parents=True, exist_ok=True)
    im = Image.fromarray(np.random.default_rng(0).integers(0, 255, (h, w, 3), np.uint8))
    kwargs = {}
    if orientation:
        exif = Image.Exif()
        exif[0x0112] = orientation
        kwargs['exif'] = exif.tobytes()
    im.save(path, 'JPEG', **kwargs)
    if cut:
        path.write_bytes(path.read_bytes()[:path.stat().st_size // 2])


def _ann(aid, image_id, cat=3, bbox=(2, 2, 10, 10), segm='poly', **extra):
    x, y, w, h = bbox
    if segm == 'poly':
        segm = [[x, y, x + w, y, x + w, y + h, x, y + h]]
    ann = dict(id=aid, image_id=image_id, category_id=cat, bbox=list(bbox), area=w * h,
               iscrowd=0)
    if segm is not None:
        ann['segmentation'] = segm
    ann.update(extra)
    return ann


def _export(root: Path, images, anns, cats=((7, 'b'), (3, 'a'))) -> Path:
    ann_file = root / 'annotations' / 'train.json'
    ann_file.parent.mkdir(parents=True, exist_ok=True)
    ann_file.write_text(json.dumps(dict(
        images=[dict(id=i, file_name=f, width=w, height=h) for i, f, w, h in images],
        annotations=anns, categories=[dict(id=i, name=n) for i, n in cats])))
    return ann_file


def test_every_coco_rule_names_the_file_and_the_id(tmp_path):
    from inline_mm.datasets.coco_checks import check_coco_instances
    img = tmp_path / 'images'
    _jpeg(img / 'ok.jpg', 40, 60)
    _jpeg(img / 'turned.jpg', 40, 60, orientation=6)      # json keeps the unturned 60x40
    _jpeg(img / 'flipped.jpg', 40, 60, orientation=3)     # 180 degrees: sizes cannot tell
    _jpeg(img / 'cut.jpg', 40, 60, cut=True)
    _jpeg(img / 'resized.jpg', 20, 30)
    _jpeg(img / 'empty.jpg', 40, 60)
    images = [(1, 'ok.jpg', 60, 40), (2, 'turned.jpg', 60, 40), (3, 'flipped.jpg', 60, 40),
              (4, 'cut.jpg', 60, 40), (5, 'resized.jpg', 60, 40), (6, 'gone.jpg', 60, 40),
              (7, 'empty.jpg', 60, 40)]
    anns = [_ann(1, 1), _ann(2, 1, segm=[[1, 1, 5, 5]]),                 # 2 points
            _ann(3, 1, segm=[[1, 1, 5, 5, 9, 9]]),                       # on a line
            _ann(4, 1, segm=dict(size=[10, 10], counts='PPYo0')),         # RLE of 10x10
            _ann(5, 1, bbox=(3, 3, 0.5, 8)), _ann(6, 1, bbox=(70, 5, 5, 5)),
            _ann(7, 1, bbox=(50, 30, 20, 20)),                            # partly outside
            _ann(8, 1, cat=99), _ann(9, 42), _ann(10, 1, segm=None),
            _ann(10, 2), _ann(11, 3), _ann(12, 4), _ann(13, 5), _ann(14, 6)]
    del anns[-1]['area']
    ann_file = _export(tmp_path, images, anns, cats=((7, 'b'), (3, 'a'), (9, 'a'), (11, 'c')))
    found = check_coco_instances(str(ann_file))
    by_code = {}
    for p in found.problems:
        by_code.setdefault(p.code, []).append(p)
    expected = {'polygon': ['annotation 2 ', 'annotation 3 '], 'rle': ['annotation 4 '],
                'box-empty': ['annotation 5 '], 'box-outside': ['annotation 6 '],
                'undeclared-category': ['annotation 8 '], 'orphan-annotation': ['annotation 9:'],
                'no-mask': ['annotation 10 '], 'duplicate-id': ['annotation id 10'],
                'duplicate-name': ["'a'"], 'coco-schema': ['annotation 14 '],
                'exif-rotation': ['image id 2'], 'truncated': ['image id 4'],
                'image-size': ['image id 5'], 'missing-file': ['image id 6']}
    assert set(by_code) == set(expected), sorted(by_code)
    for code, ids in expected.items():
        text = ' | '.join(str(p) for p in by_code[code])
        assert all(i in text for i in ids), (code, text)
    files = {p.code: p.path for p in found.problems}
    assert files['truncated'].endswith('cut.jpg') and files['polygon'].endswith('train.json')
    assert 'turns it 90 degrees clockwise' in str(by_code['exif-rotation'][0])
    warned = {w.code: str(w) for w in found.warnings}
    assert set(warned) == {'category-order', 'unused-category', 'box-partly-outside',
                           'empty-images', 'exif-orientation'}, warned
    assert 'annotation 7 ' in warned['box-partly-outside'] and 'empty.jpg' in warned['empty-images']
    assert "'c'" in warned['unused-category'] and 'flipped.jpg' in warned['exif-orientation']


def test_box_only_export_points_at_the_faster_rcnn_template(tmp_path):
    from inline_mm.cli.check_dataset import main
    from inline_mm.datasets.coco_checks import FASTER_RCNN_TEMPLATE, check_coco_instances
    assert (ROOT / FASTER_RCNN_TEMPLATE).is_file()
    _jpeg(tmp_path / 'pics' / 'a.jpg', 40, 60)
    ann_file = _export(tmp_path, [(1, 'a.jpg', 60, 40)], [_ann(1, 1, segm=None, cat=7)])
    found = check_coco_instances(str(ann_file), str(tmp_path / 'pics'))
    assert [p.code for p in found.problems] == ['box-only']
    assert FASTER_RCNN_TEMPLATE in found.problems[0].message
    assert not check_coco_instances(str(ann_file), str(tmp_path / 'pics'),
                                    task='detection').problems
    assert main([str(ann_file), '--img-dir', str(tmp_path / 'pics')]) == 1
    assert main([str(ann_file), '--img-dir', str(tmp_path / 'pics'), '--task', 'detection']) == 0
    # without --img-dir the images are looked for in ../images, which is not there
    assert main([str(ann_file)]) == 1


def test_class_names_come_from_the_file_in_mmdets_label_order(tmp_path):
    from inline_mm.datasets.coco_checks import coco_classes
    ann_file = _export(tmp_path, [], [], cats=((12, 'rect'), (3, 'circle'), (7, 'tri')))
    assert coco_classes(str(ann_file)) == ('rect', 'circle', 'tri')
    with pytest.raises(FileNotFoundError, match='INLINE_MM_DATA'):
        coco_classes(str(tmp_path / 'nothing.json'))
    bad = _export(tmp_path / 'dup', [], [], cats=((1, 'a'), (2, 'a')))
    with pytest.raises(ValueError, match='distinct'):
        coco_classes(str(bad))


def _toy_export(tmp_path) -> Path:
    from inline_mm.datasets.toy.exports import make_coco_export
    make_coco_export(str(tmp_path / 'data'), num_train=10, num_val=2, size=64)
    return tmp_path / 'data'


def _clean_toy_export(tmp_path) -> Path:
    """The small toy export with every fault fixed by the fixer's library (in place)."""
    from inline_mm.datasets.coco_checks import check_coco_instances
    from inline_mm.datasets.coco_fixes import FixRequest, fix_coco
    data = _toy_export(tmp_path)
    everything = dict(sizes=[], turn=[], drop_bad_images=True, drop_bad_annotations=True,
                      clip_boxes=True)
    train = data / 'annotations' / 'train.json'
    for split, request in (('train', FixRequest(**everything, drop_unused_categories=True)),
                           ('val', None)):
        ann_file = data / 'annotations' / f'{split}.json'
        if request is None:
            request = FixRequest(categories_from=json.loads(train.read_text())['categories'])
        found = check_coco_instances(str(ann_file))
        fixed, _ = fix_coco(json.loads(ann_file.read_text()), found, request)
        ann_file.write_text(json.dumps(fixed))
        assert not check_coco_instances(str(ann_file)).problems
    return data


@pytest.mark.parametrize('name', ['mask-rcnn', 'cascade-mask-rcnn', 'faster-rcnn', 'amp',
                                  'predict'])
def test_templates_take_root_and_classes_from_one_place(tmp_path, monkeypatch, name):
    from mmdet.registry import MODELS
    from mmdet.utils import register_all_modules
    from mmengine.config import Config
    import inline_mm  # noqa: F401
    register_all_modules()
    data = _toy_export(tmp_path)
    monkeypatch.setenv('INLINE_MM_DATA', str(data))
    files = {'mask-rcnn': TEMPLATE.name,
             'cascade-mask-rcnn': 'cascade-' + TEMPLATE.name,
             'faster-rcnn': TEMPLATE.name.replace('mask-rcnn', 'faster-rcnn'),
             'amp': TEMPLATE.name.replace('1xb4-36e', '1xb4-amp-36e'),
             'predict': TEMPLATE.name.replace('.py', '_predict.py')}
    cfg = Config.fromfile(str(TEMPLATE.parent / files[name]))
    assert cfg.classes == ('circle', 'triangle', 'rectangle', 'star')     # star: unused
    for loader in ('train', 'val', 'test'):
        ds = cfg[f'{loader}_dataloader'].dataset
        assert ds.data_root == f'{data}/' and tuple(ds.metainfo.classes) == cfg.classes
    assert cfg.val_evaluator.ann_file == f'{data}/annotations/val.json'
    roi = cfg.model.roi_head
    heads = roi.bbox_head if isinstance(roi.bbox_head, list) else [roi.bbox_head]
    assert [h.num_classes for h in heads] == [4] * len(heads)
    assert (roi.get('mask_head') is None) == (name == 'faster-rcnn')
    if roi.get('mask_head') is not None:
        assert roi.mask_head.num_classes == 4
    assert cfg.optim_wrapper.type == ('AmpOptimWrapper' if name == 'amp' else 'OptimWrapper')
    if name == 'amp':       # its parent's optimizer and lr (config_spec: amp_optimizer)
        assert cfg.optim_wrapper.optimizer == Config.fromfile(str(TEMPLATE)).optim_wrapper.optimizer
    if name == 'predict':
        assert cfg.test_evaluator.format_only and cfg.test_evaluator.ann_file == \
            f'{data}/annotations/predict.json'
        assert cfg.custom_hooks[0].type == 'PredictionOverlayHook'
    cfg.model.backbone.init_cfg = None
    MODELS.build(cfg.model)


def test_the_hook_refuses_a_box_only_export_and_a_class_order_before_training(
        tmp_path, monkeypatch):
    from types import SimpleNamespace

    from mmdet.registry import DATASETS
    from mmdet.utils import register_all_modules
    from mmengine.config import Config
    from mmengine.logging import MMLogger

    from inline_mm.engine.data_checks import DatasetCheckHook, coco_dataset_problems
    register_all_modules()
    data = _clean_toy_export(tmp_path)
    for split in ('train', 'val'):
        ann_file = data / 'annotations' / f'{split}.json'
        coco = json.loads(ann_file.read_text())
        for a in coco['annotations']:
            a.pop('segmentation')
        ann_file.write_text(json.dumps(coco))
    monkeypatch.setenv('INLINE_MM_DATA', str(data))

    def dataset(config, **change):
        ds = Config.fromfile(str(TEMPLATE.parent / config)).train_dataloader.dataset
        ds.update(change)
        return DATASETS.build(ds)

    masks = dataset(TEMPLATE.name)
    loader = SimpleNamespace(dataset=masks)
    runner = SimpleNamespace(_train_loop=SimpleNamespace(dataloader=loader), _val_loop=None,
                             logger=MMLogger.get_instance('own_instances_test'))
    with pytest.raises(ValueError, match='box-only export') as e:
        DatasetCheckHook(num_workers=1).before_train(runner)
    assert 'train.json' in str(e.value) and 'faster-rcnn_inline-swin-t' in str(e.value)
    DatasetCheckHook(num_workers=1, warn_only=('box-only',)).before_train(runner)
    boxes = dataset(TEMPLATE.name.replace('mask-rcnn', 'faster-rcnn'))
    assert coco_dataset_problems([boxes])[0] == []
    loader.dataset = boxes
    DatasetCheckHook(num_workers=1).before_train(runner)            # box-only is fine here
    reordered = dataset(TEMPLATE.name.replace('mask-rcnn', 'faster-rcnn'),
                        metainfo=dict(classes=('triangle', 'circle', 'rectangle')))
    codes = [p.code for p in coco_dataset_problems([reordered])[0]]
    assert codes == ['category-order']


# ----------------------------------------------------------------- converters
def test_labelme_conversion_groups_shapes_and_splits_reproducibly(tmp_path):
    from inline_mm.cli.labelme2coco import main
    src = tmp_path / 'lm'
    for i in range(10):
        _jpeg(src / 'sub' / f'{i}.jpg', 30, 40)
        shapes = [dict(label='cat', shape_type='polygon', group_id=1,
                       points=[[1, 1], [10, 1], [10, 10]]),
                  dict(label='cat', shape_type='polygon', group_id=1,
                       points=[[20, 20], [30, 20], [30, 28]]),
                  dict(label='box', shape_type='rectangle', group_id=None,
                       points=[[2, 3], [12, 13]]),
                  dict(label='dot', shape_type='circle', group_id=None,
                       points=[[20, 10], [24, 10]]),
                  dict(label='edge', shape_type='line', group_id=None, points=[[0, 0], [5, 5]])]
        (src / 'sub' / f'{i}.json').write_text(json.dumps(dict(
            shapes=shapes if i else [], imagePath=f'{i}.jpg', imageHeight=30, imageWidth=40)))
    assert main([str(src), str(tmp_path / 'a'), '--val-fraction', '0.3', '--seed', '1']) == 0
    assert main([str(src), str(tmp_path / 'b'), '--val-fraction', '0.3', '--seed', '1']) == 0
    a_val = json.loads((tmp_path / 'a/annotations/val.json').read_text())
    b_val = json.loads((tmp_path / 'b/annotations/val.json').read_text())
    assert a_val == b_val and len(a_val['images']) == 3
    train = json.loads((tmp_path / 'a/annotations/train.json').read_text())
    assert [c['name'] for c in train['categories']] == ['box', 'cat', 'dot']
    cat = next(a for a in train['annotations'] if a['category_id'] == 2)
    assert len(cat['segmentation']) == 2                   # one instance in two parts
    assert (tmp_path / 'a/images/sub/3.jpg').is_file()
    from inline_mm.datasets.coco_checks import check_coco_instances
    for split in ('train', 'val'):
        found = check_coco_instances(str(tmp_path / f'a/annotations/{split}.json'))
        assert not found.problems, found.problems
    with pytest.raises(SystemExit, match='nothing is overwritten'):
        main([str(src), str(tmp_path / 'a')])
    with pytest.raises(SystemExit, match="not in --classes"):
        main([str(src), str(tmp_path / 'c'), '--classes', 'cat,dot'])


def test_images_json_uses_loaded_sizes_and_training_categories(tmp_path):
    from inline_mm.cli.coco_remove_images import main as remove
    from inline_mm.cli.images2coco import main
    _jpeg(tmp_path / 'images' / 'predict' / 'a.jpg', 30, 40, orientation=6)
    _jpeg(tmp_path / 'images' / 'predict' / 'b.jpg', 30, 40)
    train = _export(tmp_path, [(1, 'predict/a.jpg', 30, 40)], [], cats=((5, 'x'), (2, 'y')))
    out = tmp_path / 'annotations' / 'predict.json'
    assert main([str(tmp_path / 'images' / 'predict'), str(out), '--categories-from',
                 str(train)]) == 0
    coco = json.loads(out.read_text())
    assert [(im['file_name'], im['width'], im['height']) for im in coco['images']] == \
        [('predict/a.jpg', 30, 40), ('predict/b.jpg', 40, 30)]
    assert coco['categories'] == json.loads(train.read_text())['categories']
    with pytest.raises(SystemExit, match='exists'):
        main([str(tmp_path / 'images'), str(out), '--categories-from', str(train)])
    with pytest.raises(SystemExit, match='another file'):
        remove([str(out), str(out), '--images', 'predict/a.jpg'])
    assert remove([str(out), str(tmp_path / 'less.json'), '--images', 'predict/a.jpg']) == 0
    assert [im['file_name'] for im in json.loads((tmp_path / 'less.json').read_text())['images']] \
        == ['predict/b.jpg']


# ----------------------------------------------------------------- EXIF frames and the fixer
@pytest.mark.parametrize('orientation', range(1, 9))
def test_annotations_turn_as_opencv_turns_the_photo(tmp_path, orientation):
    """orient_mask moves the stored pixels where OpenCV (mmcv) shows them; turn_annotation
    moves polygons (orient_point), boxes and RLE masks with them onto the same pixels."""
    import mmcv
    from pycocotools import mask as mask_utils
    from inline_mm.datasets.coco_fixes import orient_mask, turn_annotation
    h, w = 48, 80
    stored = np.zeros((h, w, 3), np.uint8)
    stored[8:24, 16:40] = (250, 30, 30)                 # 8-px blocks survive JPEG
    stored[32:48, 64:80] = (30, 250, 30)
    _jpeg_array(tmp_path / 'p.jpg', stored, orientation)
    loaded = mmcv.imread(str(tmp_path / 'p.jpg'))[..., ::-1]      # RGB
    assert np.abs(loaded.astype(int) - orient_mask(stored, orientation)).mean() < 3
    lh, lw = loaded.shape[:2]
    poly = [16, 8, 40, 8, 40, 24, 16, 24]                    # the red block
    rle = mask_utils.encode(np.asfortranarray((stored[..., 1] > 200).astype(np.uint8)))
    for segm in ([poly], dict(size=rle['size'], counts=rle['counts'].decode('ascii'))):
        ann = dict(id=1, image_id=1, category_id=1, bbox=[16, 8, 24, 16], area=384.,
                   segmentation=segm)
        turned = turn_annotation(ann, orientation, (h, w))
        s = turned['segmentation']
        m = mask_utils.decode(mask_utils.merge(mask_utils.frPyObjects(s, lh, lw))
                              if isinstance(s, list) else dict(s, counts=s['counts'].encode()))
        colour = loaded[m.astype(bool)].mean(0)
        assert (colour[0] > 200) == isinstance(segm, list) and \
            (colour[1] > 200) != isinstance(segm, list), (orientation, colour)
        if isinstance(segm, list):
            x, y, bw, bh = turned['bbox']
            ys, xs = np.nonzero(m)
            assert (x, y, x + bw, y + bh) == pytest.approx(
                (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1), abs=1)


def _jpeg_array(path: Path, rgb: np.ndarray, orientation: int = 0):
    path.parent.mkdir(parents=True, exist_ok=True)
    kwargs = {}
    if orientation > 1:
        exif = Image.Exif()
        exif[0x0112] = orientation
        kwargs['exif'] = exif.tobytes()
    Image.fromarray(rgb).save(path, 'JPEG', quality=95, **kwargs)


def test_the_checker_tells_which_frame_a_turned_photos_annotations_fit(tmp_path):
    """A photo stored 40x80 (HxW) with EXIF 6 loads as 80x40; the json says 80x40 (WxH, the
    stored size). Annotations beyond the stored height were drawn on the turned photo (fix:
    sizes); beyond the turned width, on the stored pixels (fix: turn them); inside both:
    undecided, the message names both options with the file; beyond both: neither."""
    from inline_mm.datasets.coco_checks import check_coco_instances
    img = tmp_path / 'images'
    for name in ('turned', 'stored', 'both', 'neither', 'resized', 'bare'):
        _jpeg(img / f'{name}.jpg', 40, 80, orientation=0 if name == 'resized' else 6)
    images = [(i + 1, f'{n}.jpg', 80, 40) for i, n in enumerate(
        ('turned', 'stored', 'both', 'neither'))]
    images += [(5, 'resized.jpg', 80, 60), (6, 'bare.jpg', 80, 40)]
    anns = [_ann(1, 1, bbox=(5, 50, 10, 20)),                       # y to 70 > 40
            _ann(2, 1, bbox=(1, 1, 4, 4), segm=dict(size=[80, 40], counts='0')),
            _ann(3, 2, bbox=(50, 5, 20, 10)),                       # x to 70 > 40
            _ann(4, 3, bbox=(2, 2, 10, 10)),
            _ann(5, 4, bbox=(50, 50, 20, 20)),                      # beyond both
            _ann(6, 5, bbox=(10, 45, 10, 10))]                      # fits 80x60 only
    found = check_coco_instances(str(_export(tmp_path, images, anns)))
    msg = {Path(p.path).name: p.message for p in found.problems
           if p.code in ('exif-rotation', 'image-size')}
    assert 'fit the turned photo' in msg['turned.jpg'] and '--fix-sizes' in msg['turned.jpg']
    assert 'fit the stored pixels' in msg['stored.jpg']
    assert '--turn-annotations' in msg['stored.jpg']
    assert '--fix-sizes both.jpg' in msg['both.jpg'] and \
        '--turn-annotations both.jpg' in msg['both.jpg']
    assert 'fit neither frame' in msg['neither.jpg']
    assert 'resized or replaced' in msg['resized.jpg'] and 'no annotations' in msg['bare.jpg']
    fixes = {(f.action, f.image_id) for f in found.fixes if f.action in ('sizes', 'turn')}
    assert fixes == {('sizes', 1), ('turn', 2), ('sizes', 6)}
    # the RLE of the turned size and the box outside the stored frame follow from image 1's
    # size: said so, and covered by its fix (not left out by --drop-bad-annotations)
    rle = next(p for p in found.problems if p.code == 'rle')
    assert 'annotation 2 ' in rle.message and 'follows from its image' in rle.message
    assert not [f for f in found.fixes if f.action == 'drop-annotation' and f.image_id == 1]


def test_the_fixer_writes_a_copy_that_passes_where_the_fixes_cover_every_error(tmp_path,
                                                                               capsys):
    from inline_mm.cli.check_dataset import main as check
    from inline_mm.cli.coco_fix import main as fix
    data = _toy_export(tmp_path)
    ann = data / 'annotations'
    export = (ann / 'train.json').read_text()
    assert check([str(ann / 'train.json')]) == 1
    suggested = re.search(r'^  python \S*coco_fix\.py (\S+) (\S+) (.*)$', capsys.readouterr().out,
                          re.M)
    assert suggested[2].endswith('train_fixed.json')
    flags = suggested[3].split()
    assert fix([str(ann / 'train.json'), str(ann / 'fixed.json'), *flags]) == 0
    out = capsys.readouterr().out
    assert 'OK: fixed.json passes the check' in out and 'train/0007.jpg): left out' in out
    assert (ann / 'train.json').read_text() == export                 # the export is kept
    assert check([str(ann / 'fixed.json')]) == 0
    assert_masks_on_shapes(ann / 'fixed.json', data / 'images',
                           ('train/0003.jpg', 'train/0006.jpg'))
    # the other fix for the photo annotated on its turned pixels puts its masks beside them
    assert fix([str(ann / 'train.json'), str(ann / 'wrong.json'), '--turn-annotations',
                'train/0006.jpg']) == 1
    with pytest.raises(AssertionError):
        assert_masks_on_shapes(ann / 'wrong.json', data / 'images', ('train/0006.jpg',))
    # warnings: boxes clipped, the unused category dropped; val then takes train's list
    assert fix([str(ann / 'fixed.json'), str(ann / 'clean.json'), '--clip-boxes',
                '--drop-unused-categories']) == 0
    clean = json.loads((ann / 'clean.json').read_text())
    assert [c['name'] for c in clean['categories']] == ['circle', 'triangle', 'rectangle']
    assert all(a['bbox'][0] + a['bbox'][2] <= 64 for a in clean['annotations']
               if a['image_id'] == 8)
    assert fix([str(ann / 'val.json'), str(ann / 'val_clean.json'), '--categories-from',
                str(ann / 'clean.json')]) == 0
    val = json.loads((ann / 'val_clean.json').read_text())
    assert val['categories'] == clean['categories']
    # named fixes, and what the fixer refuses
    assert fix([str(ann / 'train.json'), str(ann / 'some.json'), '--drop-annotations', '6',
                '9', '--drop-images', 'train/0007.jpg']) == 1         # the photos remain
    some = json.loads((ann / 'some.json').read_text())
    assert {a['id'] for a in some['annotations']}.isdisjoint({6, 9})
    with pytest.raises(SystemExit, match='another file'):
        fix([str(ann / 'train.json'), str(ann / 'train.json'), '--clip-boxes'])
    with pytest.raises(SystemExit, match='exists'):
        fix([str(ann / 'train.json'), str(ann / 'some.json'), '--clip-boxes'])
    with pytest.raises(SystemExit, match='no fix asked'):
        fix([str(ann / 'train.json'), str(ann / 'x.json')])
    with pytest.raises(SystemExit, match=r"no image with file_name \['nope.jpg'\]"):
        fix([str(ann / 'train.json'), str(ann / 'x.json'), '--fix-sizes', 'nope.jpg'])
    with pytest.raises(SystemExit, match=r'no annotation with id \[9999\]'):
        fix([str(ann / 'train.json'), str(ann / 'x.json'), '--drop-annotations', '9999'])
    with pytest.raises(SystemExit, match='nothing for --fix-sizes to do'):
        fix([str(ann / 'train.json'), str(ann / 'x.json'), '--fix-sizes', 'train/0001.jpg'])
