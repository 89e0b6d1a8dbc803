#!/usr/bin/env python
"""``make demo`` (docs/get_started.md): an InLine-Swin Mask R-CNN that learns, on CPU.

    python tools/demo.py          # defaults below; ~4 min on 2 idle cores, ~6 on one

1. writes the toy COCO dataset (``tools/misc/make_toy_dataset.py coco``: shapes on textured
   backgrounds, polygon and RLE masks, 300 train / 60 val images of 256 px) unless the
   one already there carries the stamp of this generator, these arguments and these
   library versions, with its files unchanged (anything else is regenerated: figures
   measured on an older generator's data are not this demo's figures);
2. trains a narrow InLine-Swin Mask R-CNN from scratch with ``tools/train.py``
   (config ``configs/inline_swin/mask-rcnn_inline-swin-nano_fpn_1xb4-700it_toy-coco.py``),
   in two data-parallel processes of one thread on two cores or more, one on one core
   (:func:`training_plan`), printing mmengine's progress lines;
3. evaluates the final checkpoint on the val split at the end of that run (mmdet's
   ``CocoMetric``: box and mask AP, in the same processes: no second start of the stack)
   and prints both;
4. draws val images into ``<work-dir>/predictions.png``: each detection's mask, box and
   label, marked right (same class as a ground-truth shape, mask IoU >= 0.5) or wrong, the
   ground truth beside it, and how many drawn detections are right in the caption.

It exits with status 1 when box or mask AP stays below ``--target`` (0.5), so the
command doubles as a check that training works end to end.  The figures, times, load
averages and the data's hash also go to ``<work-dir>/demo_result.json``.

Reproducible: the same command on the same machine gives the same AP, and any machine with
two cores or more trains with the same processes and threads (other counts sum floats in
another order and give other figures).
"""
import argparse
import copy
import glob
import json
import os
import os.path as osp
import subprocess
import sys
import threading
import time

import numpy as np

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
DEFAULT_CONFIG = 'configs/inline_swin/mask-rcnn_inline-swin-nano_fpn_1xb4-700it_toy-coco.py'
DEFAULT_DATA = 'data/toy_coco'   # the config's data_root


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--config', default=DEFAULT_CONFIG, help=f'(default: {DEFAULT_CONFIG})')
    p.add_argument('--work-dir', default='work_dirs/demo', help='(default: work_dirs/demo)')
    p.add_argument('--iters', type=int, default=None,
                   help="training iterations (default: the config's, 700)")
    p.add_argument('--seed', type=int, default=None,
                   help="random seed of the run (default: the config's, 0); the AP range over "
                        'seeds is in docs/dev/get_started.md')
    p.add_argument('--target', type=float, default=0.5,
                   help='box and mask AP the run must reach (default: 0.5)')
    p.add_argument('--regenerate', action='store_true',
                   help=f'rewrite {DEFAULT_DATA} even if it exists')
    p.add_argument('--num-images', type=int, default=8, help='val images drawn (default: 8)')
    p.add_argument('--processes', type=int, default=None,
                   help='training processes, each on an even share of the batch (default: 2 '
                        'of one thread each on two cores or more, 1 on one core: the plans '
                        'whose AP over seeds is measured)')
    return p.parse_args(argv)


def banner(msg, t0):
    print(f'\n=== [demo {time.time() - t0:6.0f}s] {msg}', flush=True)


#: the most compute threads the demo takes by default: its model is small, and past a few
#: threads OpenMP's overhead grows faster than the work it shares
MAX_THREADS = 8


def usable_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:      # not on Linux
        return os.cpu_count() or 1


def default_threads() -> int:
    """One compute thread per core this process may run on, at most :data:`MAX_THREADS`."""
    return max(1, min(usable_cores(), MAX_THREADS))


#: the most processes the demo trains in unless told (``--processes``): its AP over seeds holds
#: the floor (every seed >= 0.5) with 1 and 2 processes of one thread; 4 of one image each
#: fell to 0.486 box AP on one seed of 5 (docs/dev/get_started.md)
MAX_PROCESSES = 2


def training_plan(batch: int, processes: int = None) -> tuple:
    """``(processes, images per process, threads per process)`` for training on ``batch``
    images a step. By default the plans whose AP over seeds is measured: one process of one
    thread on one core, two processes of half the batch, one thread each, on two cores or
    more (the same numerics on every such machine). The demo's model is too small for
    OpenMP to share out (two threads trained 1.1x faster than one on 2 cores; two processes
    of half the batch, one thread each, 1.5x: docs/dev/get_started.md). ``processes`` given:
    the usable cores shared out among them. The processes are data parallel (gloo): the
    same step on the same ``batch`` images, gradients averaged."""
    if processes is None:
        most = min(usable_cores(), batch, MAX_PROCESSES)
        processes = max(p for p in range(1, most + 1) if batch % p == 0)
        return processes, batch // processes, 1
    if processes < 1 or batch % processes:
        sys.exit(f'demo: --processes {processes} does not split the batch of {batch} images '
                 'evenly; use a divisor of it')
    threads = max(1, min(usable_cores() // processes, MAX_THREADS))
    return processes, batch // processes, threads


def tool_env(threads: int = None) -> dict:
    """The environment of the tools the demo starts: ``OMP_NUM_THREADS`` (default:
    ``threads``, else one per core, :func:`default_threads`) and ``OMP_WAIT_POLICY=PASSIVE``
    unless set. Passive: an OpenMP thread that waits for a busy core sleeps instead of
    spinning; on a shared 2-core machine spinning made 2-thread training 3-9x slower than 1
    thread (measured, docs/dev/get_started.md). Neither changes what is computed."""
    env = dict(os.environ)
    env.setdefault('OMP_NUM_THREADS', str(threads or default_threads()))
    env.setdefault('OMP_WAIT_POLICY', 'PASSIVE')
    return env


def run(cmd, threads: int = None):
    """Run a tool with its output streaming through; stop the demo if it fails."""
    print('$ ' + ' '.join(cmd), flush=True)
    rc = subprocess.call(cmd, cwd=ROOT, env=tool_env(threads))
    if rc:
        tool = next((c for c in cmd if c.startswith('tools/')), cmd[1])
        sys.exit(f'demo: {tool} failed with exit status {rc}')


def ensure_data(regenerate: bool, t0: float) -> str:
    """Make sure DEFAULT_DATA holds what this generator writes with its defaults;
    return the data's content hash."""
    from inline_mm.datasets.toy import read_stamp, stamp_mismatch
    from inline_mm.datasets.toy.coco import coco_toy_stamp
    why = 'asked to (--regenerate)' if regenerate else stamp_mismatch(DEFAULT_DATA,
                                                                      coco_toy_stamp())
    if why is None:
        banner(f'reusing the toy dataset in {DEFAULT_DATA}: same generator, arguments and '
               'files (--regenerate to rewrite it)', t0)
    else:
        banner(f'writing the toy COCO dataset to {DEFAULT_DATA} ({why})', t0)
        generate(DEFAULT_DATA)
    return read_stamp(DEFAULT_DATA)['content_sha256']


def generate(out: str):
    """``tools/misc/make_toy_dataset.py coco <out>``, in this process (its imports are done)."""
    from inline_mm.cli import make_toy_dataset
    print(f'$ python tools/misc/make_toy_dataset.py coco {out}', flush=True)
    make_toy_dataset.main(['coco', out])


def load_average() -> str:
    try:
        return ' / '.join(f'{v:.1f}' for v in os.getloadavg())
    except OSError:          # not available on this platform
        return 'unknown'


class LoadSampler:
    """The 1-minute load average every ``period`` seconds while the demo runs: the
    times it reports mean little without the load they were measured under."""

    def __init__(self, period: float = 15.0):
        self.samples, self._stop = [], threading.Event()
        self._thread = threading.Thread(target=self._run, args=(period,), daemon=True)
        self._thread.start()

    def _run(self, period):
        while True:
            try:
                self.samples.append(os.getloadavg()[0])
            except OSError:
                return
            if self._stop.wait(period):
                return

    def summary(self) -> dict:
        self._stop.set()
        self._thread.join()
        s = sorted(self.samples)
        if not s:
            return {}
        return dict(min=round(s[0], 2), median=round(s[len(s) // 2], 2), max=round(s[-1], 2),
                    samples=len(s))


def read_metrics(work_dir: str) -> dict:
    """The metrics of the last run in ``work_dir`` (mmengine logs them to
    ``<work_dir>/<timestamp>/vis_data/<timestamp>.json``)."""
    logs = sorted(glob.glob(osp.join(work_dir, '*', 'vis_data', '[0-9]*.json')),
                  key=osp.getmtime)
    if not logs:
        sys.exit(f'demo: tools/train.py logged no metrics under {work_dir}')
    with open(logs[-1]) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    metrics = {}
    for line in lines:
        metrics.update(line)
    for key in ('coco/bbox_mAP', 'coco/segm_mAP'):
        if key not in metrics:
            sys.exit(f'demo: {logs[-1]} has no {key} (the model predicted nothing?)')
    return metrics


#: RGB per class in the picture
PALETTE = ((230, 60, 60), (60, 200, 60), (60, 120, 240), (230, 200, 40), (200, 60, 200),
           (40, 200, 200))
RIGHT, WRONG = (20, 150, 20), (210, 20, 20)   # the marks' colours (RGB)
FONT_SCALE = 0.45


def label_size(text: str) -> tuple:
    """``(width, height)`` of :func:`draw_label`'s box for ``text`` (its mark included)."""
    import cv2
    (w, h), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, FONT_SCALE, 1)
    return w + h + 8, h + base + 4


def draw_label(img, text: str, x: int, y: int, colour, right=None) -> tuple:
    """``text`` once, on a filled box of ``colour`` whose bottom-left is ``(x, y)`` (moved
    inside the image), in black or white, whichever reads better; with ``right`` True or
    False, a square in front of the text: green with a tick or red with a cross. Returns
    the box ``(x0, y0, x1, y1)``. (One ``putText`` per label: Hershey glyphs advance by
    their stroke width, so a thicker outline pass drawn under the text would run ahead.)"""
    import cv2
    font = cv2.FONT_HERSHEY_SIMPLEX
    (tw, h), base = cv2.getTextSize(text, font, FONT_SCALE, 1)
    w, bh = label_size(text)
    if right is None:
        w -= h + 6
    x0 = min(max(int(x), 0), img.shape[1] - w)
    y0 = min(max(int(y) - bh, 0), img.shape[0] - bh)
    x1, y1 = x0 + w, y0 + bh
    cv2.rectangle(img, (x0, y0), (x1 - 1, y1 - 1), tuple(int(c) for c in colour), -1)
    tx = x0 + 2
    if right is not None:       # the mark: a square of the text's height
        m0, m1 = (x0 + 2, y0 + 2), (x0 + 2 + h, y0 + 2 + h)
        cv2.rectangle(img, m0, m1, RIGHT if right else WRONG, -1)
        if right:
            pts = [(m0[0] + 2, m0[1] + h // 2), (m0[0] + h // 2 - 1, m1[1] - 2),
                   (m1[0] - 2, m0[1] + 2)]
            cv2.polylines(img, [np.int32(pts)], False, (255, 255, 255), 2, cv2.LINE_AA)
        else:
            cv2.line(img, (m0[0] + 2, m0[1] + 2), (m1[0] - 2, m1[1] - 2), (255, 255, 255), 2,
                     cv2.LINE_AA)
            cv2.line(img, (m0[0] + 2, m1[1] - 2), (m1[0] - 2, m0[1] + 2), (255, 255, 255), 2,
                     cv2.LINE_AA)
        tx = m1[0] + 4
    ink = (0, 0, 0) if 0.299 * colour[0] + 0.587 * colour[1] + 0.114 * colour[2] > 140 \
        else (255, 255, 255)
    cv2.putText(img, text, (tx, y0 + h + 2), font, FONT_SCALE, ink, 1, cv2.LINE_AA)
    return x0, y0, x1, y1


def place_label(size, box, taken, shape) -> tuple:
    """Where a label of ``size`` (w, h) for ``box`` goes so that it covers no label in
    ``taken`` (boxes ``(x0, y0, x1, y1)``): just above the box, else just inside its top, else
    just below it, else the first free row further down; returns its bottom-left ``(x, y)``."""
    w, h = size
    H, W = shape[:2]
    bx0, by0, bx1, by1 = box
    x = min(max(int(bx0), 0), W - w)

    def free(y):
        y = min(max(int(y), h), H)
        return all(x + w <= a0 or a1 <= x or y <= b0 or b1 <= y - h for a0, b0, a1, b1 in taken)

    for y in (by0, by0 + h, by1 + h):
        if free(y):
            return x, min(max(int(y), h), H)
    for y in range(h, H + 1, 2):
        if free(y):
            return x, y
    return x, min(max(int(by0), h), H)      # no free row: over the others, still readable text


def match_detections(dt_rles, dt_labels, gt_rles, gt_labels, iou_thr: float = 0.5) -> list:
    """For each detection, in the order given (highest score first), what it found: ``'right'``
    (a ground-truth shape of its class with mask IoU >= ``iou_thr`` that no detection before
    it took: each shape is found once, as COCO counts), ``'duplicate'`` (only shapes already
    taken), ``'wrong class'`` (only shapes of other classes) or ``'no shape'``; and the
    index of the shape a right detection took (else None)."""
    from pycocotools import mask as mask_utils
    if not len(dt_rles):
        return []
    if len(gt_rles):
        ious = mask_utils.iou(list(dt_rles), list(gt_rles), [0] * len(gt_rles))
    else:
        ious = [[] for _ in dt_rles]
    taken, found = set(), []
    for d, label in enumerate(dt_labels):
        over = [g for g, iou in enumerate(ious[d]) if iou >= iou_thr]
        same = [g for g in over if gt_labels[g] == label]
        free = [g for g in same if g not in taken]
        if free:
            g = max(free, key=lambda g: ious[d][g])
            taken.add(g)
            found.append(('right', g))
        else:
            found.append(('duplicate' if same else 'wrong class' if over else 'no shape', None))
    return found


def ground_truth(ann_file: str, classes) -> dict:
    """``{image file name: (RLE masks, class indices)}`` of a COCO annotation file."""
    import contextlib
    import io
    from pycocotools.coco import COCO
    with contextlib.redirect_stdout(io.StringIO()):      # COCO() prints its progress
        coco = COCO(ann_file)
    names = {c['id']: c['name'] for c in coco.loadCats(coco.getCatIds())}
    out = {}
    for img_id, info in coco.imgs.items():
        anns = [a for a in coco.imgToAnns[img_id] if names[a['category_id']] in classes]
        out[osp.basename(info['file_name'])] = (
            [coco.annToRLE(a) for a in anns], [classes.index(names[a['category_id']])
                                               for a in anns])
    return out


def _tint(img, rle, colour):
    from pycocotools import mask as mask_utils
    m = mask_utils.decode(rle).astype(bool)
    img[m] = 0.45 * img[m] + 0.55 * np.float32(colour)
    return m


def _outline(img, mask, colour, thickness=1):
    import cv2
    contours, _ = cv2.findContours(mask.astype(np.uint8), cv2.RETR_EXTERNAL,
                                   cv2.CHAIN_APPROX_SIMPLE)
    cv2.drawContours(img, contours, -1, colour, thickness)


def draw(pred_file: str, out_png: str, classes, title: str, num_images: int, ann_file: str,
         score_thr: float = 0.5, scale: float = 1.5) -> tuple:
    """Val images in a grid, each twice: the detections with score >= ``score_thr`` (mask,
    box, class and score, marked right or wrong by :func:`match_detections`), and beside it
    the ground truth (each shape marked found or missed). The caption counts the right
    detections. Returns ``(right, drawn)``."""
    import cv2
    from mmengine.fileio import load

    preds = sorted(load(pred_file), key=lambda p: p['img_id'])[:num_images]
    if not preds:
        sys.exit(f'demo: {pred_file} holds no predictions')
    truth = ground_truth(ann_file, list(classes))
    tiles, right_total, drawn_total, shapes_total, found_total = [], 0, 0, 0, 0
    for p in preds:
        raw = cv2.imread(p['img_path'])[..., ::-1]
        gt_rles, gt_labels = truth[osp.basename(p['img_path'])]
        inst = p['pred_instances']
        scores = inst['scores'].tolist()
        keep = sorted((i for i, s in enumerate(scores) if s >= score_thr),
                      key=lambda i: -scores[i])
        labels = [int(inst['labels'][i]) for i in keep]
        found = match_detections([inst['masks'][i] for i in keep], labels, gt_rles, gt_labels)
        right_total += sum(f == 'right' for f, _ in found)
        drawn_total += len(keep)
        shapes_total += len(gt_rles)
        found_total += len({g for _, g in found if g is not None})

        def up(img):
            return cv2.resize(np.ascontiguousarray(img), None, fx=scale, fy=scale,
                              interpolation=cv2.INTER_NEAREST)

        # the detections
        img = raw.astype(np.float32)
        masks = [_tint(img, inst['masks'][i], PALETTE[lab % len(PALETTE)])
                 for i, lab in zip(keep, labels)]
        img = up(img.clip(0, 255).astype(np.uint8))
        labels_drawn = []
        for i, lab, m, (what, _) in zip(keep, labels, masks, found):
            colour = PALETTE[lab % len(PALETTE)]
            _outline(img, up(m.astype(np.uint8)), (255, 255, 255))
            box = [v * scale for v in inst['bboxes'][i].tolist()]
            cv2.rectangle(img, (int(box[0]), int(box[1])), (int(box[2]), int(box[3])), colour,
                          1 if what == 'right' else 2)
            text = f'{classes[lab]} {scores[i]:.2f}' + ('' if what == 'right' else f' {what}')
            labels_drawn.append((text, box, colour, what == 'right'))
        taken = []
        for text, box, colour, ok in labels_drawn:      # highest score first: the best place
            x, y = place_label(label_size(text), box, taken, img.shape)
            taken.append(draw_label(img, text, x, y, colour, right=ok))
        # the ground truth, each shape marked found (a right detection took it) or missed
        gt = raw.astype(np.float32)
        gt_masks = [_tint(gt, r, PALETTE[lab % len(PALETTE)]) for r, lab in zip(gt_rles, gt_labels)]
        gt = up(gt.clip(0, 255).astype(np.uint8))
        hit = {g for _, g in found if g is not None}
        taken = []
        for g, (m, lab) in enumerate(zip(gt_masks, gt_labels)):
            _outline(gt, up(m.astype(np.uint8)), (255, 255, 255))
            ys, xs = np.nonzero(up(m.astype(np.uint8)))
            box = (xs.min(), ys.min(), xs.max(), ys.max()) if len(xs) else (0, 0, 0, 0)
            text = classes[lab] + ('' if g in hit else ' missed')
            x, y = place_label(label_size(text), box, taken, gt.shape)
            taken.append(draw_label(gt, text, x, y, PALETTE[lab % len(PALETTE)],
                                    right=g in hit))
        cv2.putText(gt, 'ground truth', (4, gt.shape[0] - 6), cv2.FONT_HERSHEY_SIMPLEX, 0.4,
                    (255, 255, 255), 1, cv2.LINE_AA)
        sep = np.full((img.shape[0], 2, 3), 255, np.uint8)
        tiles.append(np.concatenate([img, sep, gt, np.full((img.shape[0], 8, 3), 255, np.uint8)],
                                    1))
    h, w = tiles[0].shape[:2]
    tiles = [cv2.resize(t, (w, h)) for t in tiles]
    cols = min(2, len(tiles))
    rows = -(-len(tiles) // cols)
    tiles += [np.full_like(tiles[0], 255)] * (rows * cols - len(tiles))
    grid = np.concatenate([np.concatenate(tiles[r * cols:(r + 1) * cols], 1)
                           for r in range(rows)], 0)
    caption = (f'{right_total} of {drawn_total} drawn detections right (same class as a '
               f'ground-truth shape, mask IoU >= 0.5); {found_total} of {shapes_total} shapes '
               'found')
    header = np.full((48, grid.shape[1], 3), 255, np.uint8)
    for row, text in enumerate((title, caption)):
        cv2.putText(header, text, (6, 19 + 22 * row), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 0, 0),
                    1, cv2.LINE_AA)
    cv2.imwrite(out_png, np.concatenate([header, grid], 0)[..., ::-1])
    return right_total, drawn_total


def write_run_config(cfg, work_dir: str, pred_file: str, iters: int, seed=None) -> str:
    """The demo's run of ``cfg`` as a config file in ``work_dir``: ``iters`` iterations, the
    seed, and validation once at the end that also writes the predictions (mmdet's
    ``DumpDetResults``, as ``tools/test.py --out`` adds it) for the picture."""
    cfg = copy.deepcopy(cfg)
    cfg.train_cfg.max_iters = cfg.train_cfg.val_interval = iters
    cfg.default_hooks.checkpoint.interval = iters
    if seed is not None:
        cfg.randomness.seed = seed
    cfg.val_evaluator = [cfg.val_evaluator,
                         dict(type='DumpDetResults', out_file_path=pred_file)]
    path = osp.join(work_dir, 'demo_run.py')
    cfg.dump(path)
    return path


def main(argv=None):
    args = parse_args(argv)
    os.chdir(ROOT)          # the config's data_root and the tools are relative to the repo
    t0 = time.time()
    from mmengine.config import Config
    cfg = Config.fromfile(args.config)
    batch = cfg.train_dataloader.batch_size
    processes, per_process, train_threads = training_plan(batch, args.processes)
    train_omp = tool_env(train_threads)['OMP_NUM_THREADS']
    load_start = load_average()
    sampler = LoadSampler()
    print(f'demo: {os.cpu_count()} CPUs; training and evaluating in {processes} process(es) of '
          f'{train_omp} compute thread(s) (set OMP_NUM_THREADS, --processes to change); load '
          f'average (1 / 5 / 15 min) {load_start}; config {args.config}', flush=True)
    data_hash = ensure_data(args.regenerate, t0)
    print(f'toy data content sha256 {data_hash[:12]}', flush=True)

    classes = cfg.metainfo['classes']
    iters = args.iters or cfg.train_cfg.max_iters
    wd = args.work_dir
    os.makedirs(wd, exist_ok=True)

    run_seed = cfg.randomness.seed if args.seed is None else args.seed
    banner(f'training from scratch for {iters} iterations of {batch} images with tools/train.py'
           + (f' ({processes} data-parallel processes of {per_process})' if processes > 1
              else ''), t0)
    t_train = time.time()
    pred_file = osp.join(wd, 'predictions.pkl')
    run_config = write_run_config(cfg, wd, pred_file, iters, args.seed)
    # The images load in the training processes (they take ~1 ms each): no loader worker to
    # start.
    opts = [f'{loader}.{key}' for loader in ('train_dataloader', 'val_dataloader')
            for key in ('num_workers=0', 'persistent_workers=False')]
    train = ['tools/train.py', run_config, '--work-dir', wd]
    if processes > 1:
        opts.append(f'train_dataloader.batch_size={per_process}')
        # --standalone: one node, its rendezvous on a free local port torchrun picks
        train = ['-m', 'torch.distributed.run', '--standalone', f'--nproc_per_node={processes}',
                 *train, '--launcher', 'pytorch']
    run([sys.executable, *train, '--cfg-options', *opts], threads=train_threads)
    t_train = time.time() - t_train
    with open(osp.join(wd, 'last_checkpoint')) as f:
        ckpt = f.read().strip()
    metrics = read_metrics(wd)
    box, mask = metrics['coco/bbox_mAP'], metrics['coco/segm_mAP']

    png = osp.join(wd, 'predictions.png')
    right, drawn = draw(
        pred_file, png, classes,
        f'InLine-Swin Mask R-CNN, from scratch, {iters} it: box AP {box:.3f}, mask AP {mask:.3f}'
        ' (val images, detections with score >= 0.5)', args.num_images,
        cfg.val_evaluator.ann_file)
    total = time.time() - t0
    reached = box >= args.target and mask >= args.target
    load_end = load_average()
    load_run = sampler.summary()
    result = {k: metrics.get(k) for k in ('coco/bbox_mAP', 'coco/segm_mAP', 'coco/bbox_mAP_50',
                                          'coco/segm_mAP_50')}
    result.update(iters=iters, train_min=round(t_train / 60, 2), total_min=round(total / 60, 2),
                  seed=run_seed, right_of_drawn=[right, drawn], train_processes=processes,
                  train_threads=int(train_omp),
                  cpus=os.cpu_count(), load_start=load_start,
                  load_end=load_end, load_1min_during_run=load_run, data_sha256=data_hash,
                  checkpoint=ckpt)
    with open(osp.join(wd, 'demo_result.json'), 'w') as f:
        json.dump(result, f, indent=1)
    banner('done', t0)
    print(f'box AP  (coco/bbox_mAP): {box:.3f}\n'
          f'mask AP (coco/segm_mAP): {mask:.3f}\n'
          f'AP50 box / mask: {metrics.get("coco/bbox_mAP_50", float("nan")):.3f} / '
          f'{metrics.get("coco/segm_mAP_50", float("nan")):.3f}\n'
          f'training {t_train / 60:.1f} min, total {total / 60:.1f} min '
          f'(1-minute load average during the run: median {load_run.get("median")}, '
          f'{load_run.get("min")}-{load_run.get("max")}; 1 / 5 / 15 min: {load_start} at the '
          f'start, {load_end} at the end)\n'
          f'checkpoint {ckpt}\npredictions drawn in {png} ({right} of {drawn} drawn '
          'detections right)\n'
          f'target box and mask AP >= {args.target}: {"reached" if reached else "NOT reached"}',
          flush=True)
    if not reached:
        sys.exit(1)


if __name__ == '__main__':
    main()
