#!/usr/bin/env python
"""``make demo`` (docs/get_started.md): an InLine-Swin Mask R-CNN that learns, on CPU.

    python tools/demo.py          # defaults below; ~3 min on 2 idle cores

1. writes the toy COCO dataset (``tools/misc/make_toy_dataset.py coco``: shapes on textured
   backgrounds, polygon and RLE masks, 300 train / 60 val images of 256 px) unless the
   one already there carries the stamp of this generator, these arguments and these
   library versions, with its files unchanged (anything else is regenerated: figures
   measured on an older generator's data are not this demo's figures);
2. trains a narrow InLine-Swin Mask R-CNN from scratch with ``tools/train.py``
   (config ``configs/inline_swin/mask-rcnn_inline-swin-nano_fpn_1xb4-550it_toy-coco.py``),
   in one data-parallel process per core while the batch splits evenly (:func:`training_plan`),
   printing mmengine's progress lines;
3. evaluates the final checkpoint on the val split with ``tools/test.py`` (mmdet's
   ``CocoMetric``: box and mask AP) and prints both;
4. draws the predicted masks on val images into ``<work-dir>/predictions.png``.

It exits with status 1 when box or mask AP stays below ``--target`` (0.5), so the
command doubles as a check that training works end to end.  The figures, times, load
averages and the data's hash also go to ``<work-dir>/demo_result.json``.

Reproducible: the same command on the same machine gives the same AP (same processes and
threads: other counts sum floats in another order and give other figures).
"""
import argparse
import glob
import json
import os
import os.path as osp
import subprocess
import sys
import threading
import time

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
DEFAULT_CONFIG = 'configs/inline_swin/mask-rcnn_inline-swin-nano_fpn_1xb4-550it_toy-coco.py'
DEFAULT_DATA = 'data/toy_coco'   # the config's data_root


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--config', default=DEFAULT_CONFIG, help=f'(default: {DEFAULT_CONFIG})')
    p.add_argument('--work-dir', default='work_dirs/demo', help='(default: work_dirs/demo)')
    p.add_argument('--iters', type=int, default=None,
                   help="training iterations (default: the config's, 550)")
    p.add_argument('--target', type=float, default=0.5,
                   help='box and mask AP the run must reach (default: 0.5)')
    p.add_argument('--regenerate', action='store_true',
                   help=f'rewrite {DEFAULT_DATA} even if it exists')
    p.add_argument('--num-images', type=int, default=8, help='val images drawn (default: 8)')
    p.add_argument('--processes', type=int, default=None,
                   help='training processes, each on an even share of the batch (default: one '
                        'per usable core while the batch splits evenly; 1: one process)')
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


def training_plan(batch: int, processes: int = None) -> tuple:
    """``(processes, images per process, threads per process)`` for training on ``batch``
    images a step. By default one process per usable core while the batch splits evenly:
    the demo's model is too small for OpenMP to share out (two threads trained 1.1x faster
    than one on 2 cores; two processes of half the batch, one thread each, 1.5x:
    docs/dev/get_started.md). The processes are data parallel (gloo): the same step on the
    same ``batch`` images, gradients averaged."""
    if processes is None:
        cores = usable_cores()
        processes = max(p for p in range(1, min(cores, batch) + 1) if batch % p == 0)
    elif processes < 1 or batch % processes:
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
    from inline_mm.toydata import read_stamp, stamp_mismatch
    from inline_mm.toydata.coco import coco_toy_stamp
    why = 'asked to (--regenerate)' if regenerate else stamp_mismatch(DEFAULT_DATA,
                                                                      coco_toy_stamp())
    if why is None:
        banner(f'reusing the toy dataset in {DEFAULT_DATA}: same generator, arguments and '
               'files (--regenerate to rewrite it)', t0)
    else:
        banner(f'writing the toy COCO dataset to {DEFAULT_DATA} ({why})', t0)
        run([sys.executable, 'tools/misc/make_toy_dataset.py', 'coco', DEFAULT_DATA])
    return read_stamp(DEFAULT_DATA)['content_sha256']


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


def read_metrics(test_dir: str) -> dict:
    """The metrics tools/test.py logged (mmengine writes <log_dir>/<timestamp>.json)."""
    logs = sorted(glob.glob(osp.join(test_dir, '*', '*.json')), key=osp.getmtime)
    if not logs:
        sys.exit(f'demo: tools/test.py wrote no metrics under {test_dir}')
    with open(logs[-1]) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    metrics = {}
    for line in lines:
        metrics.update(line)
    for key in ('coco/bbox_mAP', 'coco/segm_mAP'):
        if key not in metrics:
            sys.exit(f'demo: {logs[-1]} has no {key} (the model predicted nothing?)')
    return metrics


def draw_label(img, text: str, x: int, y: int, colour) -> tuple:
    """``text`` once, on a filled box of ``colour`` whose bottom-left is ``(x, y)`` (moved
    inside the image), in black or white, whichever reads better; returns the box
    ``(x0, y0, x1, y1)``. (One ``putText`` per label: Hershey glyphs advance by their stroke
    width, so a thicker outline pass drawn under the text would run ahead of it.)"""
    import cv2
    font, scale = cv2.FONT_HERSHEY_SIMPLEX, 0.35
    (w, h), base = cv2.getTextSize(text, font, scale, 1)
    x0 = min(max(int(x), 0), img.shape[1] - w - 2)
    y0 = min(max(int(y) - h - base - 2, 0), img.shape[0] - h - base - 2)
    x1, y1 = x0 + w + 2, y0 + h + base + 2
    cv2.rectangle(img, (x0, y0), (x1 - 1, y1 - 1), tuple(int(c) for c in colour), -1)
    ink = (0, 0, 0) if 0.299 * colour[0] + 0.587 * colour[1] + 0.114 * colour[2] > 140 \
        else (255, 255, 255)
    cv2.putText(img, text, (x0 + 1, y0 + h + 1), font, scale, ink, 1, cv2.LINE_AA)
    return x0, y0, x1, y1


def draw(pred_file: str, out_png: str, classes, title: str, num_images: int,
         score_thr: float = 0.5):
    """Val images with predicted masks (class colour), boxes and scores, in a grid."""
    import cv2
    import numpy as np
    from mmengine.fileio import load
    from pycocotools import mask as mask_utils

    preds = sorted(load(pred_file), key=lambda p: p['img_id'])[:num_images]
    palette = np.array([(230, 60, 60), (60, 200, 60), (60, 120, 240), (230, 200, 40),
                        (200, 60, 200), (40, 200, 200)], np.float32)   # RGB per class
    tiles = []
    for p in preds:
        img = cv2.imread(p['img_path'])[..., ::-1].astype(np.float32)   # RGB
        inst = p['pred_instances']
        keep = [i for i, s in enumerate(inst['scores'].tolist()) if s >= score_thr]
        for i in keep:
            m = mask_utils.decode(inst['masks'][i]).astype(bool)
            colour = palette[int(inst['labels'][i]) % len(palette)]
            img[m] = 0.45 * img[m] + 0.55 * colour
        img = np.ascontiguousarray(img.clip(0, 255).astype(np.uint8))
        for i in keep:
            colour = tuple(int(c) for c in palette[int(inst['labels'][i]) % len(palette)])
            m = mask_utils.decode(inst['masks'][i])
            contours, _ = cv2.findContours(m, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
            cv2.drawContours(img, contours, -1, (255, 255, 255), 1)
            x0, y0, x1, y1 = (int(v) for v in inst['bboxes'][i].tolist())
            cv2.rectangle(img, (x0, y0), (x1, y1), colour, 1)
            draw_label(img, f"{classes[int(inst['labels'][i])]} {float(inst['scores'][i]):.2f}",
                       x0, y0, colour)
        tiles.append(img)
    if not tiles:
        sys.exit(f'demo: {pred_file} holds no predictions')
    h, w = tiles[0].shape[:2]
    tiles = [cv2.resize(t, (w, h)) for t in tiles]
    cols = min(4, len(tiles))
    rows = -(-len(tiles) // cols)
    tiles += [np.full_like(tiles[0], 255)] * (rows * cols - len(tiles))
    grid = np.concatenate([np.concatenate(tiles[r * cols:(r + 1) * cols], 1)
                           for r in range(rows)], 0)
    header = np.full((28, grid.shape[1], 3), 255, np.uint8)
    cv2.putText(header, title, (6, 19), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 0, 0), 1, cv2.LINE_AA)
    cv2.imwrite(out_png, np.concatenate([header, grid], 0)[..., ::-1])


def main(argv=None):
    args = parse_args(argv)
    os.chdir(ROOT)          # the config's data_root and the tools are relative to the repo
    t0 = time.time()
    from mmengine.config import Config
    cfg = Config.fromfile(args.config)
    batch = cfg.train_dataloader.batch_size
    processes, per_process, train_threads = training_plan(batch, args.processes)
    threads = tool_env()['OMP_NUM_THREADS']
    train_omp = tool_env(train_threads)['OMP_NUM_THREADS']
    load_start = load_average()
    sampler = LoadSampler()
    print(f'demo: {os.cpu_count()} CPUs; training in {processes} process(es) of '
          f'{train_omp} compute thread(s), evaluating with '
          f'{threads} (set OMP_NUM_THREADS, --processes to change); load average (1 / 5 / 15 '
          f'min) {load_start}; config {args.config}', flush=True)
    data_hash = ensure_data(args.regenerate, t0)
    print(f'toy data content sha256 {data_hash[:12]}', flush=True)

    classes = cfg.metainfo['classes']
    iters = args.iters or cfg.train_cfg.max_iters
    wd = args.work_dir
    os.makedirs(wd, exist_ok=True)

    banner(f'training from scratch for {iters} iterations of {batch} images with tools/train.py'
           + (f' ({processes} data-parallel processes of {per_process})' if processes > 1
              else ''), t0)
    t_train = time.time()
    # No validation inside training: tools/test.py evaluates once below. The images load in
    # the training process (they take ~1 ms each): no loader worker to start every epoch.
    opts = ['val_cfg=None', 'val_dataloader=None', 'val_evaluator=None',
            'train_dataloader.num_workers=0', 'train_dataloader.persistent_workers=False']
    if args.iters:
        opts += [f'train_cfg.max_iters={iters}', f'default_hooks.checkpoint.interval={iters}']
    train = ['tools/train.py', args.config, '--work-dir', wd]
    if processes > 1:
        opts.append(f'train_dataloader.batch_size={per_process}')
        # --standalone: one node, its rendezvous on a free local port torchrun picks
        train = ['-m', 'torch.distributed.run', '--standalone', f'--nproc_per_node={processes}',
                 *train, '--launcher', 'pytorch']
    run([sys.executable, *train, '--cfg-options', *opts], threads=train_threads)
    t_train = time.time() - t_train
    with open(osp.join(wd, 'last_checkpoint')) as f:
        ckpt = f.read().strip()

    banner('evaluating on the val split with tools/test.py (CocoMetric: bbox, segm)', t0)
    test_dir = osp.join(wd, 'test')
    pred_file = osp.join(wd, 'predictions.pkl')
    run([sys.executable, 'tools/test.py', args.config, ckpt, '--work-dir', test_dir,
         '--out', pred_file])
    metrics = read_metrics(test_dir)
    box, mask = metrics['coco/bbox_mAP'], metrics['coco/segm_mAP']

    png = osp.join(wd, 'predictions.png')
    draw(pred_file, png, classes,
         f'InLine-Swin Mask R-CNN, from scratch, {iters} it: box AP {box:.3f}, mask AP {mask:.3f}'
         ' (score >= 0.5)', args.num_images)
    total = time.time() - t0
    reached = box >= args.target and mask >= args.target
    load_end = load_average()
    load_run = sampler.summary()
    result = {k: metrics.get(k) for k in ('coco/bbox_mAP', 'coco/segm_mAP', 'coco/bbox_mAP_50',
                                          'coco/segm_mAP_50')}
    result.update(iters=iters, train_min=round(t_train / 60, 2), total_min=round(total / 60, 2),
                  threads=threads, train_processes=processes,
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
          f'checkpoint {ckpt}\npredictions drawn in {png}\n'
          f'target box and mask AP >= {args.target}: {"reached" if reached else "NOT reached"}',
          flush=True)
    if not reached:
        sys.exit(1)


if __name__ == '__main__':
    main()
