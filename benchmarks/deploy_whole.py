#!/usr/bin/env python
"""Deployment of whole models: ONNX Runtime (and OpenVINO, when installed) against PyTorch
eager, for detectors and segmentors with their pre- and post-processing (a benchmark, not a
test).

    python -m benchmarks.deploy_whole                 # the cases of DEFAULT; 1 thread and all cores
    python -m benchmarks.deploy_whole --models upernet_512x512 --rounds 5 --threads 1
    python -m benchmarks.deploy_whole --quick         # CI-sized: the toy models, 1 round

Models: InLine-Swin-T as the shipped configs build it with random weights
(``model.init_weights()``), and the demo's Mask R-CNN
(``mask-rcnn_inline-swin-nano_fpn_1xb4-550it_toy-coco.py``) with the checkpoint ``make demo``
trained (``--demo-checkpoint``; default ``work_dirs/demo/last_checkpoint``; the case is left
out, saying so, when there is none) on a validation image of its toy set. Each is exported
with ``inline_mm.deploy`` for its input size, twice: the ``padded`` graph (any image up to
the size, the padding masked) and the ``filled`` one (images that fill it, no masks;
``--graphs`` chooses). The random detectors are biased so that they
find what trained ones find: each RoI of Mask R-CNN scores two classes above the 0.05
threshold (as a trained COCO model leaves about 2,000 candidates for the NMS and 100
detections with masks per image), and each RetinaNet anchor two classes (``nms_pre``
candidates per level). One image filling the input (the demo: its own image), batch 1;
PyTorch runs ``model.test_step`` (mmdet's / mmseg's data preprocessor, ``predict`` and
post-processing, masks pasted to the image, ``no_grad``), ONNX Runtime and OpenVINO the file
and :meth:`OnnxModel.results <inline_mm.deploy.OnnxModel.results>` (the masks pasted to the
image as ``test_step`` pastes them), OpenVINO with ``INFERENCE_PRECISION_HINT=f32`` (its
default on CPUs with bf16 units is bf16, which changes the results) on every graph, and with
``bf16`` on the filled graph. Where the CPU has bf16 units (``inline_mm.env.bf16_support``),
PyTorch also runs ``test_step`` under bf16 autocast, and OpenVINO in bf16; elsewhere bf16 is
emulated (slower than fp32) and those columns are left out, saying so. Before timing, the
runtimes' results are compared with PyTorch's fp32 (detections matched, or the share of
equal pixels).

Then ``--rounds`` rounds run every (model, thread count, runtime) once (a case shorter
than half a second several times, the mean), interleaved, so that load from other processes
hits them alike; the table gives medians and each
runtime's time over PyTorch's fp32 (and its range over the rounds). Outputs in ``--out-dir``:
``deploy_whole.csv``, ``deploy_whole_meta.json`` (machine, versions, load averages, the
comparisons, export times).
"""
import argparse
import csv
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import torch

from benchmarks.measure import machine_info

ROOT = Path(__file__).resolve().parents[1]
DEMO_CONFIG = 'configs/inline_swin/mask-rcnn_inline-swin-nano_fpn_1xb4-550it_toy-coco.py'
#: name -> (config, input size)
CASES = {
    'mask_rcnn_800x1344': ('configs/inline_swin/mask-rcnn_inline-swin-t_fpn_1x_coco.py',
                           (800, 1344)),
    'mask_rcnn_demo_256x256': (DEMO_CONFIG, (256, 256)),
    'retinanet_512x512': ('configs/inline_swin/retinanet_inline-swin-t_fpn_1x_coco.py',
                          (512, 512)),
    'upernet_512x512': ('configs/inline_swin/'
                        'inline-swin-t-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py', (512, 512)),
    'upernet_1024x2048': ('configs/inline_swin/'
                          'inline-swin-t-in1k-pre_upernet_4xb2-80k_cityscapes-512x1024.py',
                          (1024, 2048)),
}
#: the cases run without --models (UperNet at 1024x2048 needs more than 16 GB to export)
DEFAULT = ['mask_rcnn_800x1344', 'mask_rcnn_demo_256x256', 'retinanet_512x512',
           'upernet_512x512']
#: the cases that load a trained checkpoint (--demo-checkpoint) and take a test image
TRAINED = {'mask_rcnn_demo_256x256'}
#: a round runs a short case several times (up to 20), about this long, and takes the mean
MIN_ROUND_S = 0.5
#: --quick: the toy models of inline_mm.deploy.toy (random weights) at small sizes
QUICK = {'mask_rcnn_toy': ('mask_rcnn', (96, 128)), 'upernet_toy': ('upernet', (64, 96))}
#: the graphs exported per case (inline_mm.deploy.build_graph's canvas)
GRAPHS = ('padded', 'filled')
#: the columns: (runtime, precision, graph); PyTorch's graph is the model itself
RUNTIMES = [('pytorch', 'fp32', None), ('pytorch', 'bf16', None),
            ('onnxruntime', 'fp32', 'padded'), ('onnxruntime', 'fp32', 'filled'),
            ('openvino', 'f32', 'padded'), ('openvino', 'f32', 'filled'),
            ('openvino', 'bf16', 'filled')]
#: the reference every column is divided by
EAGER = ('pytorch', 'fp32', None)


def label(key) -> str:
    """A column's name, e.g. ``onnxruntime filled`` or ``pytorch bf16``."""
    runtime, precision, graph = key
    return ' '.join([runtime] + ([precision] if precision not in ('fp32', 'f32') else [])
                    + ([graph] if graph else []))


def demo_checkpoint(given=None):
    """The demo's checkpoint: ``given``, or the last one ``make demo`` wrote (None if none)."""
    if given:
        return str(given)
    last = ROOT / 'work_dirs' / 'demo' / 'last_checkpoint'
    if last.is_file():
        path = Path(last.read_text().strip())
        path = path if path.is_absolute() else ROOT / path
        return str(path) if path.is_file() else None
    return None


def _config(name: str, tmp: Path):
    from mmengine.config import Config
    if name in QUICK:
        from inline_mm.deploy.toy import toy_config
        path = tmp / f'{name}.py'
        path.write_text(toy_config(QUICK[name][0], str(tmp / 'no_data')))
        return Config.fromfile(str(path)), QUICK[name][1]
    config, size = CASES[name]
    return Config.fromfile(str(ROOT / config)), size


def _like_trained(model):
    """A random Mask R-CNN whose RoIs each score two classes above the 0.05 threshold; a
    random RetinaNet whose anchors each score two classes above it."""
    head = getattr(getattr(model, 'roi_head', None), 'bbox_head', None)
    with torch.no_grad():
        if head is not None:
            head.fc_cls.bias.zero_()
            head.fc_cls.bias[:2] = 3.
        cls = getattr(getattr(model, 'bbox_head', None), 'retina_cls', None)
        if cls is not None:
            a = model.bbox_head.num_base_priors
            bias = cls.bias.view(a, -1)
            bias[:, :2] = 0.


def _data(model, size, seed=0):
    """One image filling the input, as the test dataloader gives it."""
    gen = torch.Generator().manual_seed(seed)
    image = torch.randint(0, 256, (3, *size), generator=gen, dtype=torch.uint8)
    meta = dict(img_shape=size, ori_shape=size, scale_factor=(1., 1.))
    try:
        from mmseg.models.segmentors import BaseSegmentor
        from mmseg.structures import SegDataSample
        if isinstance(model, BaseSegmentor):
            return dict(inputs=[image], data_samples=[SegDataSample(metainfo=meta)])
    except ImportError:
        pass
    from mmdet.structures import DetDataSample
    return dict(inputs=[image], data_samples=[DetDataSample(metainfo=meta)])


def _test_image(cfg):
    """The first image of the config's test set, as its test dataloader gives it."""
    from mmengine.registry import DefaultScope
    from mmengine.runner import Runner
    loader_cfg = dict(cfg.test_dataloader, batch_size=1, num_workers=0,
                      persistent_workers=False)
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        batch = next(iter(Runner.build_dataloader(loader_cfg)))
    return dict(inputs=batch['inputs'][:1], data_samples=batch['data_samples'][:1])


def _compare(model, data, outputs, task, threshold) -> dict:
    from inline_mm.deploy.evaluate import DetectionParity, SegmentationParity
    from inline_mm.deploy.runtime import to_data_samples
    sizes = np.array([list(data['inputs'][0].shape[1:])])
    with torch.no_grad():
        ref = model.test_step(data)
    got = to_data_samples(outputs, sizes, data['data_samples'], task, threshold)
    parity = SegmentationParity() if task == 'segmentation' else DetectionParity()
    parity.add(ref, got)
    summary = parity.summary()
    summary.pop('unmatched', None)
    return summary


def _has_openvino() -> bool:
    try:
        import openvino  # noqa: F401
    except ImportError:
        return False
    return True


def columns(graphs=GRAPHS, bf16=None) -> list:
    """The columns that run here: OpenVINO's where it is installed, bf16 ones where the CPU
    has bf16 units (``bf16``: that answer, default ``inline_mm.env.bf16_support``)."""
    if bf16 is None:
        from inline_mm.env import bf16_support
        bf16 = bf16_support('cpu')[0]
    ov = _has_openvino()
    return [k for k in RUNTIMES if (k[2] is None or k[2] in graphs)
            and (k[0] != 'openvino' or ov) and (k[1] != 'bf16' or bf16)]


def build_case(name: str, tmp: Path, checkpoint=None, onnx_dir=None, graphs=GRAPHS):
    """A case's model (eval, on the CPU), its config's scope, its one-image batch and its
    exported files (in ``onnx_dir``, reused if there; else in ``tmp``), one per graph of
    ``graphs``: ``(model, scope, data, {graph: path}, export seconds or None)``."""
    from inline_mm.apis import init_model
    from inline_mm.deploy import build_graph, export_graph
    cfg, size = _config(name, tmp)
    if name in TRAINED:
        model = init_model(cfg, checkpoint, seed=0)
        cfg = model.cfg
        data = _test_image(cfg)
    else:
        model = init_model(cfg, seed=0, init_weights=True)
        cfg = model.cfg
        _like_trained(model)
        data = _data(model, size)
    model.eval()
    paths, export_s = {}, None
    for graph in graphs:
        start = time.perf_counter()
        path = Path(onnx_dir or tmp) / (f'{name}.onnx' if graph == 'padded' else
                                        f'{name}_{graph}.onnx')
        if onnx_dir is None or not path.is_file():
            export_graph(build_graph(model, size, graph), str(path))
            export_s = (export_s or 0.) + time.perf_counter() - start
        paths[graph] = str(path)
    return model, cfg.default_scope, data, paths, export_s


def prepare(names: List[str], threads: List[int], tmp: Path, checkpoint=None, onnx_dir=None,
            keys=None):
    """Build, export (into ``onnx_dir``, reusing a file of the case already there) and
    check every model; the callables to time, per ``(case, threads, column)`` of ``keys``
    (default :func:`columns`)."""
    from mmengine.registry import DefaultScope

    from inline_mm.deploy import OnnxModel
    keys = keys or columns()
    graphs = [g for g in GRAPHS if any(k[2] == g for k in keys)]
    runs, checks, export_s = {}, {}, {}
    for name in names:
        model, scope, data, paths, seconds = build_case(name, tmp, checkpoint, onnx_dir, graphs)
        if seconds is not None:
            export_s[name] = seconds
        image = data['inputs'][0]
        meta = data['data_samples'][0].metainfo
        # the results as test_step gives them: in the original image, masks pasted there
        where = dict(scale_factors=[meta.get('scale_factor', (1., 1.))],
                     shapes=[meta.get('ori_shape', tuple(image.shape[1:]))])
        raw = {}
        for t in threads:
            for key in keys:
                runtime, precision, graph = key
                if runtime == 'pytorch':
                    def eager(m=model, d=data, n=t, bf16=precision == 'bf16'):
                        torch.set_num_threads(n)
                        with torch.no_grad(), torch.autocast('cpu', torch.bfloat16,
                                                             enabled=bf16):
                            return m.test_step(d)
                    runs[name, t, key] = eager
                    continue
                session = OnnxModel(paths[graph], threads=t, runtime=runtime,
                                    precision=None if runtime == 'onnxruntime' else precision)
                canvas, sizes = session.pad([image])
                # each runtime's outputs, and its results as test_step's (the paste included)
                raw[t, key] = lambda s=session, c=canvas, z=sizes: s(c, z)
                runs[name, t, key] = (lambda s=session, c=canvas, z=sizes, w=where:
                                      s.results(s(c, z), z, **w))
        task = session.task if raw else None
        with DefaultScope.overwrite_default_scope(scope):
            checks[name] = {label(k): _compare(model, data, raw[threads[0], k](), task,
                                               session.mask_thr_binary)
                            for k in keys if (threads[0], k) in raw}
        print(f'{name}: ' + (f'exported in {export_s[name]:.0f} s' if name in export_s
                             else f'reusing {", ".join(paths.values())}') + '; against '
              f'PyTorch fp32: {json.dumps(checks[name])}', flush=True)
    return runs, checks, export_s


def table(times: Dict[Tuple[str, int, tuple], List[float]], names, threads, rounds) -> str:
    """PyTorch fp32's median seconds, then each other column's median time over it (the
    median of the per-round ratios, and their range)."""
    keys = [k for k in RUNTIMES if k != EAGER and any(t[2] == k for t in times)]
    lines = [f'whole models, batch 1, medians of {rounds} interleaved rounds; each column: '
             'its time / PyTorch fp32 (median of the rounds\' ratios, range)', '',
             '| model | threads | pytorch (s) | ' + ' | '.join(map(label, keys)) + ' |',
             '|---|---|---|' + '---|' * len(keys)]
    for name in names:
        for t in threads:
            eager = times[name, t, EAGER]
            cells = []
            for k in keys:
                per = [a / b for a, b in zip(times[name, t, k], eager)]
                cells.append(f'{statistics.median(per):.2f}x ({min(per):.2f}-{max(per):.2f})')
            lines.append(f'| {name} | {t} | {statistics.median(eager):.2f} | '
                         + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--models', nargs='+', choices=list(CASES), default=None,
                   help=f'cases (default: {" ".join(DEFAULT)})')
    p.add_argument('--demo-checkpoint', default=None,
                   help="the demo's trained checkpoint for mask_rcnn_demo_256x256 (default: "
                        "the one of work_dirs/demo/last_checkpoint, which `make demo` writes)")
    p.add_argument('--threads', type=int, nargs='+', default=None,
                   help='thread counts (default: 1 and all cores)')
    p.add_argument('--rounds', type=int, default=None, help='interleaved rounds (default 3)')
    p.add_argument('--quick', action='store_true', help='the toy models, 1 round: checks it runs')
    p.add_argument('--out-dir', type=Path, default=ROOT / 'work_dirs' / 'benchmark')
    p.add_argument('--onnx-dir', type=Path, default=None,
                   help='keep the exported files here and reuse those already there (export '
                        'once, time in later runs; default: a temporary folder)')
    p.add_argument('--clock', choices=['wall', 'cpu'], default='wall',
                   help="what the table divides: 'wall' seconds (default), or 'cpu', this "
                        "process's CPU time: with --threads 1 on a machine other jobs load, "
                        'the work done, not the share of the cores it got (the CSV has both)')
    p.add_argument('--graphs', nargs='+', choices=GRAPHS, default=list(GRAPHS),
                   help='the graphs to export and run (default: both)')
    p.add_argument('--columns', nargs='+', default=None, metavar='COLUMN',
                   help='only these columns besides PyTorch fp32, by their names in the table '
                        '(e.g. "onnxruntime filled" "openvino bf16 filled")')
    args = p.parse_args(argv)
    names = list(QUICK) if args.quick else (args.models or list(DEFAULT))
    checkpoint = demo_checkpoint(args.demo_checkpoint)
    if checkpoint is None and TRAINED & set(names):
        if args.models:
            p.error(f"{', '.join(sorted(TRAINED & set(names)))} needs the demo's trained "
                    'checkpoint: run `make demo` first, or give --demo-checkpoint')
        print(f"(no demo checkpoint: {', '.join(sorted(TRAINED))} left out; `make demo` "
              'trains one)', flush=True)
        names = [n for n in names if n not in TRAINED]
    from inline_mm.env import bf16_support
    bf16, why = bf16_support('cpu')
    keys = columns(args.graphs, bf16)
    if not bf16:
        print(f'(bf16 columns left out: {why})', flush=True)
    if not _has_openvino():
        print("(OpenVINO columns left out: openvino is not installed; pip install "
              "'inline_mm[openvino]')", flush=True)
    if args.columns:
        unknown = set(args.columns) - {label(k) for k in keys}
        if unknown:
            p.error(f'--columns: {", ".join(sorted(unknown))} not among those that run here: '
                    + ', '.join(f'"{label(k)}"' for k in keys if k != EAGER))
        keys = [k for k in keys if k == EAGER or label(k) in args.columns]
    threads = args.threads or sorted({1, os.cpu_count() or 1})
    if args.clock == 'cpu' and threads != [1]:
        p.error('--clock cpu measures one thread: give --threads 1')
    rounds = args.rounds or (1 if args.quick else 3)
    if rounds < 1 or min(threads) < 1:
        p.error('--rounds and --threads must be >= 1')
    import onnxruntime
    meta = dict(machine_info(), models=names, threads=threads, rounds=rounds,
                demo_checkpoint=checkpoint if TRAINED & set(names) else None,
                onnxruntime=onnxruntime.__version__, bf16=[bf16, why], clock=args.clock,
                columns=[label(k) for k in keys])
    try:
        import openvino
        meta['openvino'] = openvino.__version__
    except ImportError:
        meta['openvino'] = None
    torch_threads = torch.get_num_threads()
    with tempfile.TemporaryDirectory() as tmp:
        if args.onnx_dir:
            args.onnx_dir.mkdir(parents=True, exist_ok=True)
        runs, checks, export_s = prepare(names, threads, Path(tmp), checkpoint, args.onnx_dir,
                                         keys)
        reps = {}
        for key, fn in runs.items():               # warm-up; short runs repeat in a round
            start = time.perf_counter()
            fn()
            reps[key] = max(1, min(20, int(MIN_ROUND_S / max(time.perf_counter() - start,
                                                              1e-3))))
        for name in names:                         # the same count for a case's runtimes
            for t in threads:
                n = max(v for k, v in reps.items() if k[:2] == (name, t))
                reps.update({k: n for k in reps if k[:2] == (name, t)})
        times = {k: [] for k in runs}
        cpu = {k: [] for k in runs}
        for r in range(rounds):
            for key, fn in runs.items():
                start, start_cpu = time.perf_counter(), time.process_time()
                for _ in range(reps[key]):
                    fn()
                times[key].append((time.perf_counter() - start) / reps[key])
                cpu[key].append((time.process_time() - start_cpu) / reps[key])
            print(f'round {r + 1}/{rounds} done' + (
                f' (load average {os.getloadavg()[0]:.1f})' if hasattr(os, 'getloadavg')
                else ''), flush=True)
    torch.set_num_threads(torch_threads)
    wall = times
    if args.clock == 'cpu':
        times = cpu
    if hasattr(os, 'getloadavg'):
        meta['load_average_end'] = os.getloadavg()
    meta.update(checks=checks, export_s=export_s)
    print()
    print(table(times, names, threads, rounds)
          + ('\n(CPU time of this process)' if args.clock == 'cpu' else ''))
    args.out_dir.mkdir(parents=True, exist_ok=True)
    with open(args.out_dir / 'deploy_whole.csv', 'w', newline='') as f:
        w = csv.writer(f)
        w.writerow(['model', 'threads', 'runtime', 'round', 'seconds', 'cpu_seconds'])
        for (name, t, key), ts in wall.items():
            for i, (s, c) in enumerate(zip(ts, cpu[name, t, key])):
                w.writerow([name, t, label(key), i, f'{s:.6f}', f'{c:.6f}'])
    (args.out_dir / 'deploy_whole_meta.json').write_text(json.dumps(meta, indent=2, default=str))
    return times, checks


if __name__ == '__main__':
    main()
