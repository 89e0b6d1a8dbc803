#!/usr/bin/env python
"""Deployment: ONNX Runtime latency of the InLine backbones against mmdet's Softmax
backbones of the same layout, every model exported the same way (a benchmark, not a test).

    python -m benchmarks.deploy              # 800x1333: InLine-Swin-T, Swin-T, InLine-PVT-S, PVT-S
    python -m benchmarks.deploy --size 512 --rounds 5
    python -m benchmarks.deploy --quick               # CI-sized: 96x128, 2 rounds

Each backbone (random weights, stochastic depth off, eval, batch 1) is exported with
``torch.onnx.export`` (TorchScript exporter, opset 17, constant folding, the input size
fixed), checked against eager on one input (max relative error over the outputs), and
loaded into one ONNX Runtime CPU session (``--threads`` intra-op threads, default: torch's
thread count). Then ``--rounds`` rounds run every model once in ONNX Runtime and once in
eager PyTorch (``no_grad``), interleaved, so that load from other processes hits them
alike; the table gives medians and, per pair, InLine's time over its Softmax counterpart's
(and the per-round range of that ratio). The InLine backbones export through their
traced form (``inline_mm.models.inline_function``): the local term as nine shifted
multiply-adds, padding-unaware, and the size guard in the graph (docs/export_and_timm.md).
Results: the table on stdout, ``deploy.csv`` and ``meta.json`` in ``--out-dir``.
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

import torch

from benchmarks.backbones import MODELS
from benchmarks.measure import machine_info

ROOT = Path(__file__).resolve().parents[1]
#: (InLine, its Softmax counterpart) pairs compared
PAIRS = [('InLine-Swin-T', 'Swin-T'), ('InLine-PVT-S', 'PVT-S')]


def _parse_size(text: str) -> Tuple[int, int]:
    parts = [int(p) for p in text.lower().split('x')]
    if len(parts) == 1:
        parts *= 2
    if len(parts) != 2 or min(parts) < 32:
        raise argparse.ArgumentTypeError(f'size {text!r}: use N or HxW, sides >= 32')
    return parts[0], parts[1]


def export(model: torch.nn.Module, size: Tuple[int, int], path: Path) -> Path:
    """The same export for every model: fixed size, batch 1, opset 17."""
    x = torch.randn(1, 3, *size)
    with torch.no_grad():
        torch.onnx.export(model, (x,), str(path), input_names=['input'], opset_version=17,
                          dynamo=False, do_constant_folding=True)
    return path


def _rel_error(got, ref) -> float:
    ref = [r for r in (ref if isinstance(ref, (list, tuple)) else [ref])]
    return max(float((torch.from_numpy(g) - r).abs().max() / r.abs().max().clamp_min(1e-12))
               for g, r in zip(got, ref))


def run(names: List[str], size: Tuple[int, int], rounds: int, threads: int, out_dir: Path):
    import onnxruntime as ort
    torch.manual_seed(0)
    x = torch.randn(1, 3, *size)
    feed = {'input': x.numpy()}
    sessions, models, export_s, errors = {}, {}, {}, {}
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            model = MODELS[name][0]()
            model.eval()
            t = time.perf_counter()
            path = export(model, size, Path(tmp) / f'{name}.onnx')
            export_s[name] = time.perf_counter() - t
            sessions[name] = ort.InferenceSession(str(path), options,
                                                  providers=['CPUExecutionProvider'])
            with torch.no_grad():
                ref = model(x)
            got = sessions[name].run(None, feed)         # also the warm-up
            errors[name] = _rel_error(got, ref)
            models[name] = model
            print(f'{name}: exported in {export_s[name]:.1f} s, max rel. error vs eager '
                  f'{errors[name]:.1e}', flush=True)
    times: Dict[Tuple[str, str], List[float]] = {(n, k): [] for n in names
                                                 for k in ('onnxruntime', 'eager')}
    for r in range(rounds):
        for name in names:
            t = time.perf_counter()
            sessions[name].run(None, feed)
            times[name, 'onnxruntime'].append(time.perf_counter() - t)
            with torch.no_grad():
                t = time.perf_counter()
                models[name](x)
                times[name, 'eager'].append(time.perf_counter() - t)
        print(f'round {r + 1}/{rounds} done', flush=True)
    return times, export_s, errors


def table(times, names, size, rounds) -> str:
    med = {k: statistics.median(v) for k, v in times.items()}
    lines = [f'ONNX Runtime vs eager, {size[0]}x{size[1]}, batch 1, {rounds} interleaved rounds '
             '(median seconds)', '',
             '| model | ONNX Runtime (s) | eager (s) | ORT / eager |', '|---|---|---|---|']
    for n in names:
        lines.append(f"| {n} | {med[n, 'onnxruntime']:.3f} | {med[n, 'eager']:.3f} | "
                     f"{med[n, 'onnxruntime'] / med[n, 'eager']:.2f}x |")
    lines += ['', '| pair | runtime | InLine / Softmax (median) | per-round range |',
              '|---|---|---|---|']
    for a, b in PAIRS:
        if a in names and b in names:
            for rt in ('onnxruntime', 'eager'):
                per = [x / y for x, y in zip(times[a, rt], times[b, rt])]
                lines.append(f'| {a} / {b} | {rt} | {med[a, rt] / med[b, rt]:.2f}x | '
                             f'{min(per):.2f}-{max(per):.2f}x |')
    return '\n'.join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--size', type=_parse_size, default=None, help='HxW (default 800x1333)')
    p.add_argument('--models', nargs='+', choices=[m for pair in PAIRS for m in pair],
                   default=[m for pair in PAIRS for m in pair])
    p.add_argument('--rounds', type=int, default=None, help='interleaved rounds (default 7)')
    p.add_argument('--threads', type=int, default=None,
                   help="ONNX Runtime intra-op threads (default: torch's thread count)")
    p.add_argument('--quick', action='store_true', help='96x128, 2 rounds: checks it runs')
    p.add_argument('--out-dir', type=Path, default=ROOT / 'work_dirs' / 'benchmark')
    args = p.parse_args(argv)
    size = args.size or ((96, 128) if args.quick else (800, 1333))
    rounds = args.rounds or (2 if args.quick else 7)
    if rounds < 1:
        p.error('--rounds must be >= 1')
    threads = args.threads or torch.get_num_threads()
    meta = dict(machine_info(), size=size, rounds=rounds, ort_threads=threads)
    import onnxruntime
    meta['onnxruntime'] = onnxruntime.__version__
    times, export_s, errors = run(args.models, size, rounds, threads, args.out_dir)
    if hasattr(os, 'getloadavg'):
        meta['load_average_end'] = os.getloadavg()
    print()
    print(table(times, args.models, size, rounds))
    args.out_dir.mkdir(parents=True, exist_ok=True)
    with open(args.out_dir / 'deploy.csv', 'w', newline='') as f:
        w = csv.writer(f)
        w.writerow(['model', 'runtime', 'round', 'seconds', 'export_s', 'max_rel_error'])
        for (name, rt), ts in times.items():
            for i, t in enumerate(ts):
                w.writerow([name, rt, i, f'{t:.6f}', f'{export_s[name]:.2f}',
                            f'{errors[name]:.3e}'])
    (args.out_dir / 'meta.json').write_text(json.dumps(meta, indent=2, default=str))
    return times, errors


if __name__ == '__main__':
    main()
