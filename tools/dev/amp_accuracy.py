#!/usr/bin/env python
"""The AP that bf16 evaluation costs, through the stock tools (issue 61).

    python tools/dev/amp_accuracy.py                    # train what is missing, evaluate, table
    python tools/dev/amp_accuracy.py --train-only       # the checkpoints only
    python tools/dev/amp_accuracy.py --app              # and the app's precision choice

For each model and seed, in ``--work-dir`` (a checkpoint already there is used again, and an
evaluation newer than it read again):

- ``det``: the demo's InLine-Swin Mask R-CNN (``tools/demo.py --seed S``: its config, its toy
  COCO set, its 2-process plan), box and mask AP on the toy val split;
- ``seg``: the toy UperNet of :mod:`inline_mm.deploy.toy` (a 16-channel InLine-Swin) trained
  with ``tools/train.py`` for ``--seg-iters`` iterations on the toy ADE20K set
  (``tools/misc/make_toy_dataset.py ade``: 40 training images), mIoU on its 10 val images;

then ``tools/test.py CONFIG CHECKPOINT`` evaluates each checkpoint twice: in fp32, and with
``--cfg-options test_cfg.fp16=True`` (mmengine's ``TestLoop`` runs the model under autocast:
bf16 on a CPU, fp16 on CUDA). The table gives both and the fp32 - bf16 gap per seed (mIoU as a
fraction, as AP); exit status 1 when a gap exceeds ``--max-gap`` (0.01). Results also go to
``<work-dir>/amp_accuracy.json``.

``--localise`` evaluates the detector in bf16 again with one part at a time kept in fp32
(backbone, neck, RPN head, RoI head; mmengine's runner in this process): where the AP moves.

``--app`` also measures what ``python -m inline_mm.app --precision bf16`` should do with the
weights, on the app's own model (the demo's detector, seed 0): seconds per prediction through
the app's ``Viewer`` in fp32, in bf16 autocast, and in bf16 autocast with the weights cast to
bf16 once (rounds interleaved, medians and per-round ratios), and the box and mask AP of the
cast weights (mmengine's runner in this process: ``tools/test.py`` cannot cast them).

Every tool, and this process's own runs, use ``OMP_NUM_THREADS=1`` and
``OMP_WAIT_POLICY=PASSIVE`` unless set (the demo's training plan is its own: 2 processes of 1
thread).
"""
import argparse
import glob
import json
import os
import os.path as osp
import statistics
import subprocess
import sys
import time

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
DET_CONFIG = 'configs/inline_swin/mask-rcnn_inline-swin-nano_fpn_1xb4-700it_toy-coco.py'
#: what each model's table reports (mmdet's CocoMetric, mmseg's IoUMetric keys)
METRICS = {'det': ('coco/bbox_mAP', 'coco/segm_mAP'), 'seg': ('mIoU',)}
NAMES = {'coco/bbox_mAP': 'box AP', 'coco/segm_mAP': 'mask AP', 'mIoU': 'mIoU'}
PRECISIONS = {'fp32': [], 'bf16': ['test_cfg.fp16=True']}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--work-dir', default='work_dirs/amp_accuracy',
                   help='checkpoints and evaluations (default: work_dirs/amp_accuracy)')
    p.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    p.add_argument('--models', nargs='+', choices=list(METRICS), default=list(METRICS))
    p.add_argument('--seg-iters', type=int, default=300,
                   help='training iterations of the toy UperNet (default: 300)')
    p.add_argument('--max-gap', type=float, default=0.01,
                   help='the largest fp32 - bf16 gap allowed (default: 0.01)')
    p.add_argument('--train-only', action='store_true', help='train what is missing, then stop')
    p.add_argument('--fresh-eval', action='store_true',
                   help='evaluate again even where the work dir holds an evaluation')
    p.add_argument('--app', action='store_true',
                   help="also time the app's precisions and the AP of bf16-cast weights")
    p.add_argument('--app-rounds', type=int, default=7, help='(default: 7)')
    p.add_argument('--localise', action='store_true',
                   help="also evaluate the detector in bf16 with one part at a time (backbone, "
                   'neck, RPN head, RoI head) kept in fp32: where the AP moves')
    return p.parse_args(argv)


def tool_env() -> dict:
    """The environment of the tools, and of this process's own runs (``--app``,
    ``--localise``): one compute thread, passive waits, unless set."""
    env = dict(os.environ)
    env.setdefault('OMP_NUM_THREADS', '1')
    env.setdefault('OMP_WAIT_POLICY', 'PASSIVE')
    return env


def run(cmd, log: str):
    """Run ``cmd`` in the repository, its output to ``log``; stop with its tail if it fails."""
    print('$ ' + ' '.join(cmd) + f'   > {log}', flush=True)
    t = time.time()
    with open(log, 'w') as f:
        rc = subprocess.call(cmd, cwd=ROOT, env=tool_env(), stdout=f, stderr=subprocess.STDOUT)
    if rc:
        with open(log) as f:
            tail = f.read()[-3000:]
        sys.exit(f'{tail}\namp_accuracy: {cmd[1]} failed with exit status {rc} (log: {log})')
    print(f'  {time.time() - t:.0f} s', flush=True)


def seg_config(work_dir: str, iters: int) -> str:
    """The toy UperNet's config in ``work_dir``, validated and tested on the toy set's val
    split (its :mod:`inline_mm.deploy.toy` form tests on the training images); the toy ADE20K
    set written first if it is not there."""
    from inline_mm.deploy.toy import toy_config
    data = osp.join(work_dir, 'data', 'toy_ade')
    if not osp.isdir(osp.join(data, 'annotations', 'validation')):
        run([sys.executable, 'tools/misc/make_toy_dataset.py', 'ade', data],
            osp.join(work_dir, 'make_toy_ade.log'))
    path = osp.join(work_dir, 'upernet_toy.py')
    text = toy_config('upernet', data, iters) + """
# issue 61's AP table: validate and test on the val split
val_dataloader = dict(val_dataloader, dataset=dict(
    dataset, data_prefix=dict(img_path='images/validation',
                              seg_map_path='annotations/validation')))
test_dataloader = val_dataloader
"""
    with open(path, 'w') as f:
        f.write(text)
    return path


def last_checkpoint(run_dir: str):
    path = osp.join(run_dir, 'last_checkpoint')
    if not osp.isfile(path):
        return None
    with open(path) as f:
        ckpt = f.read().strip()
    return ckpt if osp.isfile(ckpt) else None


def train(model: str, seed: int, args) -> tuple:
    """``(config, checkpoint)`` of ``model`` at ``seed``: trained unless already there."""
    run_dir = osp.abspath(osp.join(args.work_dir, f'{model}-seed{seed}'))
    if model == 'det':
        config, cmd = DET_CONFIG, [sys.executable, 'tools/demo.py', '--seed', str(seed),
                                   '--work-dir', run_dir, '--target', '0']
    else:
        config = seg_config(osp.abspath(args.work_dir), args.seg_iters)
        cmd = [sys.executable, 'tools/train.py', config, '--work-dir', run_dir,
               '--cfg-options', f'randomness.seed={seed}']
    ckpt = last_checkpoint(run_dir)
    if ckpt is None:
        os.makedirs(run_dir, exist_ok=True)
        run(cmd, run_dir + '.log')
        ckpt = last_checkpoint(run_dir)
    else:
        print(f'{model} seed {seed}: using {ckpt} again', flush=True)
    return config, ckpt


def test_metrics(eval_dir: str):
    """The path of the newest ``tools/test.py`` metrics in ``eval_dir`` (mmengine's
    ``<work-dir>/<timestamp>/<timestamp>.json``), or None."""
    found = sorted(glob.glob(osp.join(eval_dir, '*', '[0-9]*_[0-9]*.json')), key=osp.getmtime)
    return found[-1] if found else None


def evaluate(model: str, seed: int, config: str, ckpt: str, precision: str, args) -> dict:
    """``tools/test.py`` on ``ckpt`` in ``precision``; an evaluation already in the work
    dir, newer than the checkpoint, is read again unless ``--fresh-eval``."""
    eval_dir = osp.abspath(osp.join(args.work_dir, 'eval', f'{model}-seed{seed}-{precision}'))
    found = test_metrics(eval_dir)
    if found and not args.fresh_eval and osp.getmtime(found) > osp.getmtime(ckpt):
        print(f'{model} seed {seed} {precision}: reading {found} again', flush=True)
    else:
        os.makedirs(eval_dir, exist_ok=True)
        opts = ['test_dataloader.num_workers=0', 'test_dataloader.persistent_workers=False',
                *PRECISIONS[precision]]
        run([sys.executable, 'tools/test.py', config, ckpt, '--work-dir', eval_dir,
             '--cfg-options', *opts], eval_dir + '.log')
        found = test_metrics(eval_dir)
        if found is None:
            sys.exit(f'amp_accuracy: tools/test.py logged no metrics under {eval_dir}')
    with open(found) as f:
        metrics = json.load(f)
    out = {}
    for key in METRICS[model]:
        value = float(metrics[key])
        out[key] = value / 100 if key == 'mIoU' else value     # mmseg gives percent
    return out


def table(results: dict, max_gap: float) -> tuple:
    """Markdown rows of ``results`` ({model: {seed: {precision: metrics}}}) and whether
    every gap is within ``max_gap``."""
    rows = ['| model, metric | seed | fp32 | bf16 autocast | fp32 - bf16 |',
            '|---|---|---|---|---|']
    ok, ranges = True, []
    for model, seeds in results.items():
        for key in METRICS[model]:
            gaps = []
            for seed, r in sorted(seeds.items()):
                a, b = r['fp32'][key], r['bf16'][key]
                gaps.append(a - b)
                ok &= abs(a - b) <= max_gap + 1e-9
                rows.append(f'| {model} {NAMES[key]} | {seed} | {a:.4f} | {b:.4f} | '
                            f'{a - b:+.4f} |')
            ranges.append(f'{model} {NAMES[key]}: fp32 - bf16 from {min(gaps):+.4f} to '
                          f'{max(gaps):+.4f} over seeds {", ".join(map(str, sorted(seeds)))}')
    return rows, ranges, ok


# --------------------------------------------------------------------------- where it is lost
#: the detector's parts ``--localise`` keeps in fp32 one at a time, and the method each is
#: entered through at test time (the heads' post-processing follows their outputs' dtype)
PARTS = {'backbone': 'forward', 'neck': 'forward', 'rpn_head': 'predict', 'roi_head': 'predict'}


def _in_fp32(method):
    """``method`` run with autocast off and its floating-point tensors (and tuples of them)
    made fp32."""
    import torch

    def as_fp32(x):
        if torch.is_tensor(x) and x.is_floating_point():
            return x.float()
        if isinstance(x, (tuple, list)) and x and all(torch.is_tensor(y) for y in x):
            return type(x)(as_fp32(y) for y in x)
        return x

    def fp32(*args, **kwargs):
        with torch.autocast('cpu', enabled=False):
            return method(*(as_fp32(a) for a in args), **kwargs)
    return fp32


def localise(config: str, ckpt: str, work_dir: str) -> dict:
    """Box and mask AP in bf16 autocast with each of :data:`PARTS` kept in fp32 (on this
    model instance only), through mmengine's runner in this process."""
    from mmengine.runner import Runner

    from inline_mm.apis import read_config
    from inline_mm.engine import install
    install()
    out = {}
    for part in (None, *PARTS):
        cfg = read_config(config)
        cfg.load_from = ckpt
        cfg.test_cfg = dict(type='TestLoop', fp16=True)
        cfg.test_dataloader.num_workers = 0
        cfg.test_dataloader.persistent_workers = False
        cfg.work_dir = osp.join(work_dir, 'localise')
        cfg.experiment_name = f'amp_accuracy_localise_{part}_{os.getpid()}'
        runner = Runner.from_cfg(cfg)
        runner.load_or_resume()
        if part is not None:
            module = getattr(runner.model, part)
            setattr(module, PARTS[part], _in_fp32(getattr(module, PARTS[part])))
        metrics = runner.test()
        out[part or 'none'] = {k: float(metrics[k]) for k in METRICS['det']}
        print(f'bf16, {part or "nothing"} in fp32: {out[part or "none"]}', flush=True)
    return out


# --------------------------------------------------------------------------- the app
def app_precision(config: str, ckpt: str, rounds: int) -> dict:
    """Seconds per ``Viewer.predict`` on the toy val images in fp32, bf16 autocast and bf16
    autocast with the weights cast once; and the box and mask AP of the cast weights."""
    import copy

    import torch
    from mmengine.runner import Runner

    from inline_mm.apis import read_config
    from inline_mm.app.viewer import Viewer
    os.chdir(ROOT)
    fp32 = Viewer(config, ckpt, device='cpu')
    amp = Viewer(config, ckpt, device='cpu', precision='bf16')
    cast = Viewer(config, ckpt, device='cpu', precision='bf16')
    cast.model.to(torch.bfloat16)
    images = [fp32.read(p) for p in sorted(glob.glob('data/toy_coco/val2017/*'))[:12]]
    variants = {'fp32': fp32, 'bf16 autocast': amp, 'bf16 autocast, weights cast': cast}
    for v in variants.values():          # warm-up
        v.predict(images[0])
    times = {k: [] for k in variants}
    for _ in range(rounds):
        for name, v in variants.items():
            t = time.perf_counter()
            for image in images:
                v.predict(image)
            times[name].append((time.perf_counter() - t) / len(images))
    out = {'seconds_per_image': {k: statistics.median(t) for k, t in times.items()},
           'per_round_ratio_to_bf16_autocast': {
               k: [round(a / b, 3) for a, b in zip(t, times['bf16 autocast'])]
               for k, t in times.items()},
           'images': len(images), 'rounds': rounds, 'threads': torch.get_num_threads()}
    # the cast weights' AP: the stock test loop under autocast, the model cast after loading
    cfg = read_config(config)
    cfg.load_from = ckpt
    cfg.test_cfg = dict(type='TestLoop', fp16=True)
    cfg.test_dataloader.num_workers = 0
    cfg.test_dataloader.persistent_workers = False
    cfg.work_dir = osp.join(ROOT, 'work_dirs', 'amp_accuracy_app_cast')
    cfg.experiment_name = f'amp_accuracy_app_cast_{os.getpid()}'
    runner = Runner.from_cfg(copy.deepcopy(cfg))
    runner.load_or_resume()
    runner.model.to(torch.bfloat16)
    metrics = runner.test()
    out['cast_weights_ap'] = {k: float(metrics[k]) for k in METRICS['det']}
    return out


def main(argv=None):
    args = parse_args(argv)
    os.chdir(ROOT)
    os.environ.update(tool_env())       # before torch loads: its threads for --app, --localise
    from inline_mm.env import bf16_support
    import platform
    has, why = bf16_support('cpu')
    print(f'amp_accuracy: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, '
          f'bf16 units: {"yes" if has else "no"} ({why}); load average '
          f'{" / ".join(f"{v:.1f}" for v in os.getloadavg())}', flush=True)
    os.makedirs(args.work_dir, exist_ok=True)
    trained = {(m, s): train(m, s, args) for m in args.models for s in args.seeds}
    if args.train_only:
        return
    results = {m: {} for m in args.models}
    for (model, seed), (config, ckpt) in trained.items():
        results[model][seed] = {p: evaluate(model, seed, config, ckpt, p, args)
                                for p in PRECISIONS}
    rows, ranges, ok = table(results, args.max_gap)
    report = dict(results=results, ranges=ranges, max_gap=args.max_gap, within=ok,
                  bf16_units=why)
    if args.localise and 'det' in args.models:
        report['localise'] = {seed: localise(*trained[('det', seed)], args.work_dir)
                              for seed in args.seeds}
    if args.app and 'det' in args.models:
        report['app'] = app_precision(*trained[('det', min(args.seeds))], args.app_rounds)
    with open(osp.join(args.work_dir, 'amp_accuracy.json'), 'w') as f:
        json.dump(report, f, indent=1)
    print('\n'.join(rows + [''] + ranges))
    for seed, parts in report.get('localise', {}).items():
        fp32 = results['det'][seed]['fp32']
        print(f'det seed {seed}, fp32 - bf16 with one part in fp32: ' + '; '.join(
            f'{part} {" / ".join(f"{fp32[k] - v[k]:+.3f}" for k in METRICS["det"])}'
            for part, v in parts.items()))
    if 'app' in report:
        print('app:', json.dumps(report['app'], indent=1))
    print(f'every gap within {args.max_gap}: {"yes" if ok else "NO"}')
    if not ok:
        sys.exit(1)


if __name__ == '__main__':
    main()
