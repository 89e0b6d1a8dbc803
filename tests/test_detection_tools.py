"""End to end through the real tools on a tiny toy COCO dataset (CPU): train.py writes
checkpoints, test.py reports box and mask mAP, --resume continues a killed run,
dist_train.sh trains with 2 processes over gloo, and a missing backbone checkpoint
stops training before the first iteration."""
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import NANO_DET
from support import free_port, load_script, subprocess_env, write_toy_coco_config
from inline_mm.datasets.toy.coco import make_coco_toy

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 300

# One worker for the module: its tests share one training run (the module fixture).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group('detection_tools')]


@pytest.fixture(scope='module')
def tiny(tmp_path_factory):
    """A tiny dataset and a child of the demo config that trains on it in seconds."""
    base = tmp_path_factory.mktemp('det_e2e')
    data = base / 'data'
    make_coco_toy(str(data), num_train=6, num_val=3, size=64, max_objects=2, seed=1)
    cfg = write_toy_coco_config(NANO_DET, base, data, 64, extra='''
train_cfg = dict(max_iters=2, val_interval=1000)  # (the loop still validates at its end)
default_hooks = dict(logger=dict(interval=1), checkpoint=dict(interval=1, max_keep_ckpts=3))
''')
    return dict(base=base, config=str(cfg), data=data)


def tool(*args, timeout=TIMEOUT):
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=subprocess_env(),
                          capture_output=True, text=True, timeout=timeout)


def logged_iters(text):
    return [int(m) for m in re.findall(r'Iter\(train\) \[\s*(\d+)/', text)]


@pytest.fixture(scope='module')
def trained(tiny):
    wd = tiny['base'] / 'train'
    out = tool('tools/train.py', tiny['config'], '--work-dir', str(wd))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return dict(tiny, wd=wd, log=out.stdout + out.stderr)


@pytest.mark.subprocess
def test_det_train_writes_checkpoints(trained):
    assert logged_iters(trained['log']) == [1, 2]
    assert (trained['wd'] / 'iter_2.pth').is_file()
    assert (trained['wd'] / 'last_checkpoint').read_text().strip().endswith('iter_2.pth')


@pytest.mark.subprocess
def test_det_test_reports_box_and_mask_map(trained):
    out = tool('tools/test.py', trained['config'], str(trained['wd'] / 'iter_2.pth'),
               '--work-dir', str(trained['base'] / 'test'))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    log = out.stdout + out.stderr
    for key in ('coco/bbox_mAP', 'coco/segm_mAP'):
        m = re.search(re.escape(key) + r': (-?[\d.]+)', log)
        assert m, f'{key} not reported:\n{log[-2000:]}'
        assert -1 <= float(m[1]) <= 1
    metrics = {}
    for f in (trained['base'] / 'test').glob('*/*.json'):
        for line in f.read_text().splitlines():
            metrics.update(json.loads(line))
    assert {'coco/bbox_mAP', 'coco/segm_mAP'} <= set(metrics)


@pytest.mark.subprocess
def test_det_resume_after_kill(tiny):
    wd = tiny['base'] / 'resume'
    # A long run, killed hard as soon as it has written a checkpoint.
    proc = subprocess.Popen(
        [sys.executable, 'tools/train.py', tiny['config'], '--work-dir', str(wd),
         '--cfg-options', 'train_cfg.max_iters=200', 'default_hooks.checkpoint.interval=2'],
        cwd=ROOT, env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)
    marker = wd / 'last_checkpoint'
    deadline = time.time() + TIMEOUT
    try:
        while not (marker.is_file() and marker.read_text().strip()):
            assert proc.poll() is None, 'training ended before writing a checkpoint'
            assert time.time() < deadline, 'no checkpoint within the time limit'
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    done = int(re.search(r'iter_(\d+)\.pth', marker.read_text())[1])
    assert done < 200

    out = tool('tools/train.py', tiny['config'], '--work-dir', str(wd), '--resume',
               '--cfg-options', f'train_cfg.max_iters={done + 2}')
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-3000:]
    assert f'resumed epoch: 0, iter: {done}' in log
    assert logged_iters(log) == [done + 1, done + 2]
    assert (wd / f'iter_{done + 2}.pth').is_file()


@pytest.mark.subprocess
def test_det_dist_train_two_cpu_processes(tiny):
    wd = tiny['base'] / 'dist'
    e = subprocess_env(PORT=str(free_port()), PYTHON=sys.executable)
    out = subprocess.run(['bash', 'tools/dist_train.sh', tiny['config'], '2', '--work-dir',
                          str(wd)], cwd=ROOT, env=e, capture_output=True, text=True,
                         timeout=TIMEOUT)
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-4000:]
    assert re.search(r'Distributed training: True', log) and 'GPU number: 2' in log, log[-3000:]
    assert logged_iters(log) == [1, 2]       # rank 0 logs; each iteration is one global step
    assert (wd / 'iter_2.pth').is_file()


@pytest.mark.subprocess
def test_det_missing_backbone_checkpoint_fails_before_training(tiny):
    wd = tiny['base'] / 'missing'
    missing = str(tiny['base'] / 'no_such_dir' / 'inline_swin_t.pth')
    out = tool('tools/train.py', tiny['config'], '--work-dir', str(wd), '--cfg-options',
               # (the demo config trains from scratch: init_cfg=None is replaced whole)
               'model.backbone.init_cfg._delete_=True', 'model.backbone.init_cfg.type=Pretrained',
               f'model.backbone.init_cfg.checkpoint={missing}')
    log = out.stdout + out.stderr
    assert out.returncode != 0
    assert 'checkpoint not found' in log and missing in log, log[-3000:]
    assert not logged_iters(log)
    assert not list(wd.glob('*.pth'))


def test_det_toy_coco_is_valid_coco(tmp_path):
    """Every mask encoding decodes to the stored area and box; same seed, same files."""
    import numpy as np
    from pycocotools.coco import COCO
    from pycocotools import mask as mask_utils
    classes = ('circle', 'triangle', 'rectangle', 'ring')
    s = make_coco_toy(str(tmp_path / 'a'), num_train=12, num_val=4, size=96, classes=classes)
    assert s['train']['images'] == 12 and s['val']['images'] == 4
    coco = COCO(str(tmp_path / 'a/annotations/instances_train2017.json'))
    assert [c['name'] for c in coco.loadCats(coco.getCatIds())] == list(classes)
    kinds = set()
    for ann in coco.loadAnns(coco.getAnnIds()):
        seg = ann['segmentation']
        kinds.add('polygon' if isinstance(seg, list) else
                  'rle' if isinstance(seg['counts'], str) else 'uncompressed')
        m = coco.annToMask(ann)
        assert m.sum() == ann['area'] > 0
        ys, xs = np.nonzero(m)
        x, y, w, h = ann['bbox']
        assert abs(xs.min() - x) <= 1 and abs(ys.min() - y) <= 1
        assert abs(xs.max() + 1 - (x + w)) <= 1 and abs(ys.max() + 1 - (y + h)) <= 1
        if classes[ann['category_id'] - 1] == 'ring':
            cy, cx = int(round(ys.mean())), int(round(xs.mean()))
            assert m[cy, cx] == 0                      # the hole a polygon could not hold
            assert mask_utils.area(coco.annToRLE(ann)) == ann['area']
    assert kinds == {'polygon', 'rle', 'uncompressed'}
    img = coco.loadImgs(coco.getImgIds()[0])[0]
    assert (tmp_path / 'a/train2017' / img['file_name']).stat().st_size > 0
    make_coco_toy(str(tmp_path / 'b'), num_train=12, num_val=4, size=96, classes=classes)
    for rel in ('annotations/instances_val2017.json', 'train2017/000003.jpg'):
        assert (tmp_path / 'a' / rel).read_bytes() == (tmp_path / 'b' / rel).read_bytes()
    with pytest.raises(ValueError, match='distinct names'):
        make_coco_toy(str(tmp_path / 'c'), classes=('circle', 'circle'))


def test_demo_data_stamp_detects_other_generators(tmp_path, monkeypatch):
    """The demo reuses data/toy_coco only if this generator, with these arguments and
    library versions, wrote exactly those files; anything else is regenerated."""
    import json
    from inline_mm.datasets.toy import STAMP_FILE, stamp_mismatch
    from inline_mm.datasets.toy.coco import coco_toy_stamp
    args = dict(num_train=3, num_val=2, size=48)
    root = tmp_path / 'toy'
    s = make_coco_toy(str(root), **args)
    assert stamp_mismatch(str(root), coco_toy_stamp(**args)) is None
    assert len(s['content_sha256']) == 64
    assert 'params' in stamp_mismatch(str(root), coco_toy_stamp(num_train=4, num_val=2, size=48))
    other = json.loads((root / STAMP_FILE).read_text())
    other['generator_sha256'] = '0' * 64                  # an older generator's data
    (root / STAMP_FILE).write_text(json.dumps(other))
    assert 'generator_sha256' in stamp_mismatch(str(root), coco_toy_stamp(**args))
    make_coco_toy(str(root), **args)
    (root / 'val2017' / '000001.jpg').write_bytes(b'edited')
    assert 'changed' in stamp_mismatch(str(root), coco_toy_stamp(**args))
    (root / STAMP_FILE).unlink()                          # data from before stamps existed
    assert 'no readable' in stamp_mismatch(str(root), coco_toy_stamp(**args))

    demo = _load_demo()
    calls = []
    monkeypatch.setattr(demo, 'generate', lambda out: (calls.append(out), make_coco_toy(
        out, **args)))
    # The demo asks for the default arguments' stamp; here: the small set's.
    monkeypatch.setattr('inline_mm.datasets.toy.coco.coco_toy_stamp',
                        lambda *a, **k: coco_toy_stamp(*a, **(k or ({} if a else args))))
    monkeypatch.setattr(demo, 'DEFAULT_DATA', str(root))
    first = demo.ensure_data(False, 0.0)                  # no stamp: regenerates
    assert len(calls) == 1 and len(first) == 64
    assert demo.ensure_data(False, 0.0) == first and len(calls) == 1   # reused
    assert demo.ensure_data(True, 0.0) == first and len(calls) == 2    # --regenerate


def test_demo_uses_the_cores_it_has_and_keeps_what_the_user_sets(monkeypatch):
    """One compute thread per usable core (at most MAX_THREADS), passive OpenMP waiting;
    OMP_NUM_THREADS / OMP_WAIT_POLICY in the environment win."""
    import os
    demo = _load_demo()
    monkeypatch.delenv('OMP_NUM_THREADS', raising=False)
    monkeypatch.delenv('OMP_WAIT_POLICY', raising=False)
    monkeypatch.setattr(os, 'sched_getaffinity', lambda pid: set(range(2)), raising=False)
    env = demo.tool_env()
    assert env['OMP_NUM_THREADS'] == '2' and env['OMP_WAIT_POLICY'] == 'PASSIVE'
    monkeypatch.setattr(os, 'sched_getaffinity', lambda pid: set(range(64)), raising=False)
    assert demo.tool_env()['OMP_NUM_THREADS'] == str(demo.MAX_THREADS)
    monkeypatch.setenv('OMP_NUM_THREADS', '1')
    monkeypatch.setenv('OMP_WAIT_POLICY', 'ACTIVE')
    assert demo.tool_env()['OMP_NUM_THREADS'] == '1'
    assert demo.tool_env(threads=4)['OMP_NUM_THREADS'] == '1'
    assert demo.tool_env()['OMP_WAIT_POLICY'] == 'ACTIVE'


def test_demo_trains_in_the_plans_whose_ap_is_measured(monkeypatch):
    """(processes, images each, threads each): one process of one thread on one core, two of
    one thread on two cores or more (the same numerics on every such machine); given
    --processes, the cores shared out among them; --processes must divide the batch."""
    import os
    demo = _load_demo()
    for cores, plan in [(1, (1, 4, 1)), (2, (2, 2, 1)), (3, (2, 2, 1)), (4, (2, 2, 1)),
                        (64, (2, 2, 1))]:
        monkeypatch.setattr(os, 'sched_getaffinity', lambda pid, n=cores: set(range(n)),
                            raising=False)
        assert demo.training_plan(4) == plan, cores
    assert demo.training_plan(4, processes=1) == (1, 4, demo.MAX_THREADS)
    assert demo.training_plan(4, processes=4) == (4, 1, demo.MAX_THREADS)
    with pytest.raises(SystemExit, match='--processes 3 does not split the batch of 4'):
        demo.training_plan(4, processes=3)


def _load_demo():
    return load_script('tools/demo.py')


def test_demo_picture_draws_each_label_once_inside_its_box():
    """predictions.png: each detection's label is one text on a filled box, every pixel of it
    inside that box, also at the image's edge. (An outline drawn as a second, thicker
    ``putText`` ran ahead of the text, as Hershey glyphs advance by their stroke: "0.93"
    showed as "0.933".) The right / wrong mark sits inside the box too."""
    import numpy as np
    demo = _load_demo()
    for (x, y), right in zip(((10, 30), (150, 2), (40, 40)), (None, True, False)):
        img = np.full((64, 160, 3), 127, np.uint8)
        x0, y0, x1, y1 = demo.draw_label(img, 'triangle 0.93', x, y, (230, 60, 60), right)
        assert 0 <= x0 < x1 <= 160 and 0 <= y0 < y1 <= 64
        rows, cols = np.nonzero((img != 127).any(-1))
        assert (rows.min(), rows.max() + 1, cols.min(), cols.max() + 1) == (y0, y1, x0, x1)
        assert (img[y0:y1, x0:x1] == 255).all(-1).any()   # white ink on the dark red box
        if right is not None:                             # the mark's green or red
            mark = demo.RIGHT if right else demo.WRONG
            assert (img[y0:y1, x0:x1] == mark).all(-1).sum() > 10


def test_demo_labels_of_overlapping_boxes_do_not_cover_each_other():
    """Several detections of one shape (boxes nearly alike, one at the image's top): each
    label gets its own place, inside the image."""
    demo = _load_demo()
    shape, taken = (384, 384, 3), []
    for i, box in enumerate([(100, 100, 200, 180), (102, 98, 201, 182), (99, 101, 198, 179),
                             (101, 100, 200, 180), (0, 0, 60, 40), (2, 1, 61, 42)]):
        w, h = demo.label_size(f'rectangle 0.9{i} duplicate')
        x, y = demo.place_label((w, h), box, taken, shape)
        rect = (x, y - h, x + w, y)
        assert 0 <= rect[0] and rect[2] <= shape[1] and 0 <= rect[1] and rect[3] <= shape[0]
        for a in taken:
            assert rect[2] <= a[0] or a[2] <= rect[0] or rect[3] <= a[1] or a[3] <= rect[1]
        taken.append(rect)


def _rle(mask):
    import numpy as np
    from pycocotools import mask as mask_utils
    return mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))


def test_demo_marks_each_detection_by_the_shape_it_found(tmp_path):
    """A detection is right when a ground-truth shape of its class overlaps its mask with IoU
    >= 0.5 and no higher-scored detection took that shape (COCO's one match a shape); else a
    duplicate, the wrong class, or no shape. The picture puts the ground truth beside and
    counts the right ones; on an image the val set's ground truth of the demo's generator."""
    import cv2
    import numpy as np
    import pickle
    demo = _load_demo()
    rect, circle, far = (np.zeros((96, 128), bool) for _ in range(3))
    rect[20:60, 30:80] = True                                    # a rectangle (class 1)
    cv2.circle(circle.view(np.uint8), (100, 70), 15, 1, -1)      # a circle (class 0)
    far[80:95, 0:15] = True
    near_rect = rect.copy()
    near_rect[55:60] = False                                     # IoU 0.875 with rect
    gt = [_rle(rect), _rle(circle)], [1, 0]
    found = demo.match_detections([_rle(near_rect), _rle(rect), _rle(circle), _rle(far)],
                                  [1, 1, 1, 0], *gt)
    assert found == [('right', 0), ('duplicate', None), ('wrong class', None),
                     ('no shape', None)]
    assert demo.match_detections([_rle(rect)], [1], [], []) == [('no shape', None)]
    assert demo.match_detections([], [], *gt) == []

    # the picture from a predictions file (as DumpDetResults writes it) and a COCO file
    image = tmp_path / 'val' / '000000.jpg'
    image.parent.mkdir()
    cv2.imwrite(str(image), np.full((96, 128, 3), 90, np.uint8))
    coco = dict(images=[dict(id=0, file_name='000000.jpg', width=128, height=96)],
                categories=[dict(id=1, name='circle'), dict(id=2, name='rectangle')],
                annotations=[dict(id=1, image_id=0, category_id=2, iscrowd=0, area=2000.,
                                  bbox=[30, 20, 50, 40],
                                  segmentation=[[30, 20, 80, 20, 80, 60, 30, 60]]),
                             dict(id=2, image_id=0, category_id=1, iscrowd=0, area=700.,
                                  bbox=[85, 55, 30, 30], segmentation=_rle(circle) | dict(
                                      counts=_rle(circle)['counts'].decode()))])
    (tmp_path / 'val.json').write_text(json.dumps(coco))
    pred = dict(img_id=0, img_path=str(image), pred_instances=dict(
        scores=np.array([0.93, 0.8, 0.7, 0.6, 0.2]), labels=np.array([1, 1, 1, 0, 0]),
        bboxes=np.array([[30., 20., 80., 55.], [30., 20., 80., 60.], [85., 55., 115., 85.],
                         [0., 80., 15., 95.], [85., 55., 115., 85.]]),
        masks=[_rle(near_rect), _rle(rect), _rle(circle), _rle(far), _rle(circle)]))
    (tmp_path / 'p.pkl').write_bytes(pickle.dumps([pred]))
    right, drawn = demo.draw(str(tmp_path / 'p.pkl'), str(tmp_path / 'p.png'),
                             ('circle', 'rectangle'), 'title', 8, str(tmp_path / 'val.json'))
    assert (right, drawn) == (1, 4)                 # the 0.2 circle is below the score shown
    picture = cv2.imread(str(tmp_path / 'p.png'))[..., ::-1]
    assert picture.shape[0] == 48 + 144 and picture.shape[1] > 2 * 192   # detections | truth
    marks = [(picture == m).all(-1).sum() for m in (demo.RIGHT, demo.WRONG)]
    assert marks[0] > 0 and marks[1] > marks[0]     # 1 right; 3 wrong (+ the missed circle)
