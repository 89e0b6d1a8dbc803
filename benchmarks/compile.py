#!/usr/bin/env python
"""``torch.compile`` on a stream of input sizes: compile time per new size, graphs, and
steady-state speed against eager (a benchmark, not a test).

    python -m benchmarks.compile                                   # InLine-Swin-T, detection sizes
    python -m benchmarks.compile --family InLineDeiT --arch tiny --sizes 224x224 384x384
    python -m benchmarks.compile --smoke --sizes 64x96 72x80 88x64 # the tests' small models

For each size in order: the first compiled call (its time, minus the eager time of the
same call, is that size's compile time, or ~0 when a graph is reused), the number of
graphs dynamo has compiled so far, the max abs difference from eager (outputs; with
``--train`` also the input gradient, ``grad_err``), the guard that failed when that size
recompiled (``recompile``: dynamo's own reason, e.g. ``tensor 'x' size mismatch at index
2``), then the median of ``--repeats`` compiled and eager calls. The count includes a
discarded first attempt under ``dynamic=True`` with Inductor (dynamo specialises the float
attributes it made symbolic and restarts once), so one graph reads 2. Inductor's cache is a
fresh directory per run (``TORCHINDUCTOR_CACHE_DIR``), so compile times are cold. Results: a
table on stdout and ``compile.csv`` in ``--out-dir``.
"""
import argparse
import csv
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

DETECTION_SIZES = ['800x1216', '800x1088', '736x1344', '800x1344']


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return out, time.perf_counter() - t


def _guard_failures():
    """Every recompile reason dynamo has recorded so far, in order (``torch._dynamo.utils.
    guard_failures``: the failed guard of the cached graph, one entry per recompile)."""
    from torch._dynamo.utils import guard_failures
    return [str(r) for code in list(guard_failures) for r in guard_failures[code]]


def run(family: str, arch: str, sizes, dynamic, backend: str, repeats: int, smoke: bool,
        device: str, train: bool):
    import torch._dynamo
    import torch._dynamo.testing
    from inline_mm.models import FAMILIES
    torch._dynamo.reset()
    spec = FAMILIES[family]
    torch.manual_seed(0)
    model = spec.cls(**(spec.smoke if smoke else dict(arch=arch, drop_path_rate=0.)))
    model = model.to(device).train(train)
    counter = torch._dynamo.testing.CompileCounterWithBackend(backend)
    compiled = torch.compile(model, backend=counter, dynamic=dynamic)
    rows = []
    for size in sizes:
        h, w = (int(v) for v in size.split('x'))
        x = torch.randn(1, model.in_channels, h, w, device=device)

        def call(m):
            if not train:
                with torch.no_grad():
                    return m(x), None
            xi = x.detach().clone().requires_grad_()
            out = m(xi)
            sum(o.float().square().mean() for o in out).backward()
            return out, xi.grad

        (ref, ref_grad), eager_s = _timed(lambda: call(model))
        failures = _guard_failures()
        (got, got_grad), first_s = _timed(lambda: call(compiled))
        reasons = _guard_failures()[len(failures):]
        err = max(float((g - r).detach().abs().max()) for g, r in zip(got, ref))
        eager = statistics.median(_timed(lambda: call(model))[1] for _ in range(repeats))
        fast = statistics.median(_timed(lambda: call(compiled))[1] for _ in range(repeats))
        row = dict(size=size, compile_s=round(max(first_s - eager_s, 0.), 2),
                   graphs=counter.frame_count, max_abs_err=f'{err:.1e}')
        if train:
            row['grad_err'] = f'{float((got_grad - ref_grad).abs().max()):.1e}'
        row.update(compiled_s=round(fast, 4), eager_s=round(eager, 4),
                   speedup=round(eager / fast, 2),
                   recompile=' | '.join(r.replace('\n', '; ') for r in reasons) or '-')
        rows.append(row)
        print(' '.join(f'{k}={v}' for k, v in rows[-1].items()), flush=True)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--family', default='InLineSwin')
    parser.add_argument('--arch', default='tiny')
    parser.add_argument('--smoke', action='store_true', help="the family's smoke preset")
    parser.add_argument('--sizes', nargs='+', default=DETECTION_SIZES, help='HxW, in order')
    parser.add_argument('--dynamic', choices=['none', 'true', 'false'], default='none')
    parser.add_argument('--backend', default='inductor')
    parser.add_argument('--train', action='store_true', help='forward + backward')
    parser.add_argument('--repeats', type=int, default=5)
    parser.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    parser.add_argument('--out-dir', default='work_dirs/benchmark_compile')
    args = parser.parse_args(argv)
    os.environ.setdefault('TORCHINDUCTOR_CACHE_DIR', tempfile.mkdtemp(prefix='inductor_'))
    dynamic = {'none': None, 'true': True, 'false': False}[args.dynamic]
    rows = run(args.family, args.arch, args.sizes, dynamic, args.backend, args.repeats,
               args.smoke, args.device, args.train)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / 'compile.csv', 'w', newline='') as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f'wrote {out / "compile.csv"}')


if __name__ == '__main__':
    main()
