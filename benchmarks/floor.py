"""The InLine module against its own linear layers (``python -m benchmarks --floor``).

An :class:`~inline_mm.models.attention.InLineAttention` is its ``qkv`` and ``proj``
linear layers plus the attention proper: the token mean and the predicted 3x3 kernels,
the means and the key/value covariance of every head, ``q M``, and the local 3x3 term.
The linear layers are the floor: what a module that made its queries, keys and values
would pay before attending at all (on the CPU the module's kernel folds the query
projection into ``x (W_q^T M)`` and takes the covariance from ``x^T x`` without making
K, so it can run below it). This measures the module against it, for the widths of
InLine-Swin-T's first stage (C=96, 3 heads) and of its
third (C=384, 12 heads) at 16k and 65k tokens (a 128x128 and a 256x256 map: stage 1
of a 512 and of a 1024 image), batch 1:

* ``linears``: the module's own ``qkv`` and ``proj`` layers on inputs (and, training,
  output gradients) of the shapes and layouts they get in the module;
* ``module``: ``attn(x, hw)``, the whole module.

Forward (``no_grad``) and forward + backward (the gradient of a fixed random output
gradient, parameter gradients included), all four steps of a case timed once per
round, in ``--repeats`` rounds; medians of the wall clock and of the CPU time of the
process (:class:`.measure.Timer`), and the module / linears ratios.

With ``--compile-backend`` (e.g. ``inductor``) both run under ``torch.compile``: whether a
compiled model gets nearer the floor. Then (eager only) one profiled forward + backward of
each, with every aten op's self CPU time
aggregated by (op, input shapes): the module's minus the linears' is what the
attention adds, op by op (``--profile-rows`` largest), the profile the ratio comes
from.
"""
import csv
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from inline_mm.models.attention import InLineAttention
from .measure import Timer

__all__ = ['FULL_CASES', 'QUICK_CASES', 'run_floor', 'floor_table', 'profile_table',
           'write_floor_csv']

#: (channels, heads, map side): C=96/3 heads and C=384/12 heads at 16k and 65k tokens
FULL_CASES = [(96, 3, 128), (96, 3, 256), (384, 12, 128), (384, 12, 256)]
QUICK_CASES = [(96, 3, 16), (384, 12, 8)]
STEPS = ('linears forward', 'module forward', 'linears forward+backward',
         'module forward+backward')


def _steps(attn: InLineAttention, x: torch.Tensor, grad: torch.Tensor,
           hw: Tuple[int, int], backend: Optional[str] = None) -> Dict[str, Callable[[], None]]:
    """The four steps of :data:`STEPS`. The linears run on inputs and gradients of the
    shapes and layouts they get in the module: ``qkv`` on ``x`` with a ``(B, N, 3C)``
    output gradient, ``proj`` on a dense ``(B, N, C)`` tensor (``x`` stands in for the
    attention output) with the module's output gradient. ``backend``: both under
    ``torch.compile`` with it (what a compiled model runs)."""
    grad_qkv = torch.randn(*x.shape[:2], 3 * attn.dim, device=x.device,
                           generator=torch.Generator(x.device).manual_seed(1))

    def linears(t):
        return attn.qkv(t), attn.proj(t)

    def module(t):
        return (attn(t, hw),)

    if backend is not None:
        linears, module = (torch.compile(fn, backend=backend) for fn in (linears, module))

    def forward(fn):
        def step():
            with torch.no_grad():
                fn(x)
        return step

    def training(fn):
        def step():
            outs = fn(x.detach().requires_grad_())
            torch.autograd.backward(outs, (grad_qkv, grad)[-len(outs):])
            attn.zero_grad(set_to_none=True)
        return step

    return dict(zip(STEPS, (forward(linears), forward(module), training(linears),
                            training(module))))


def _self_times(step: Callable[[], None]) -> Dict[Tuple[str, str], float]:
    """Self CPU (or CUDA) microseconds of one ``step`` per (aten op, input shapes)."""
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CPU] + \
        ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=activities, record_shapes=True) as prof:
        step()
    out: Dict[Tuple[str, str], float] = defaultdict(float)
    for ev in prof.key_averages(group_by_input_shape=True):
        if ev.key.startswith('aten::'):
            us = ev.self_device_time_total if torch.cuda.is_available() else ev.self_cpu_time_total
            out[(ev.key, str(ev.input_shapes))] += us
    return out


def run_floor(cases: Sequence[Tuple[int, int, int]], repeats: int, warmup: int,
              device: torch.device, profile_rows: int = 8,
              backend: Optional[str] = None) -> Tuple[List[dict], List[dict]]:
    """Time every case of ``cases`` ((C, heads, side) each); returns the timing rows
    (one per case and step) and the profile rows (the largest ``profile_rows``
    differences per case and mode; none when compiled: the ops run inside generated
    kernels). ``backend``: time module and linears compiled with it (the first warm-up
    run compiles; at least one is made)."""
    timer = Timer(device)
    rows, prof_rows = [], []
    for c, heads, side in cases:
        torch.manual_seed(0)
        attn = InLineAttention(c, heads).to(device)
        n = side * side
        x = torch.randn(1, n, c, device=device)
        grad = torch.randn(1, n, c, device=device)
        steps = _steps(attn, x, grad, (side, side), backend)
        for step in steps.values():
            for _ in range(max(warmup, 1 if backend else 0)):
                timer(step)
        wall: Dict[str, List[float]] = {k: [] for k in steps}
        cpu: Dict[str, List[float]] = {k: [] for k in steps}
        for rep in range(repeats):
            order = list(steps) if rep % 2 == 0 else list(steps)[::-1]
            for name in order:
                wall[name].append(timer(steps[name]))
                if timer.last_cpu is not None:
                    cpu[name].append(timer.last_cpu)
        for name in steps:
            rows.append(dict(device=device.type, compiled=backend or '', channels=c,
                             heads=heads, height=side,
                             width=side, tokens=n, step=name,
                             median_ms=statistics.median(wall[name]) * 1e3,
                             min_ms=min(wall[name]) * 1e3, max_ms=max(wall[name]) * 1e3,
                             cpu_median_ms=statistics.median(cpu[name]) * 1e3
                             if cpu[name] else None,
                             runs=len(wall[name]), threads=torch.get_num_threads()))
        print(f'  C={c:3d} heads={heads:2d} {side}x{side}: ' + ', '.join(
            f'{name} {statistics.median(wall[name]) * 1e3:.1f} ms' for name in steps),
            flush=True)
        for mode in ('forward', 'forward+backward') if profile_rows and not backend else ():
            lin = _self_times(steps[f'linears {mode}'])
            mod = _self_times(steps[f'module {mode}'])
            total = sum(mod.values())
            diff = {k: mod.get(k, 0.) - lin.get(k, 0.) for k in set(mod) | set(lin)}
            for (op, shapes), us in sorted(diff.items(), key=lambda kv: -kv[1])[:profile_rows]:
                prof_rows.append(dict(device=device.type, channels=c, heads=heads, tokens=n,
                                      mode=mode, op=op, input_shapes=shapes,
                                      added_ms=us / 1e3, module_total_ms=total / 1e3))
        del attn, x, grad
    return rows, prof_rows


def _median(rows: List[dict], key: Tuple, step: str, field: str = 'median_ms'):
    for r in rows:
        if (r['device'], r['channels'], r['heads'], r['tokens']) == key and r['step'] == step:
            return r[field]
    return None


def floor_table(rows: List[dict]) -> str:
    keys = list(dict.fromkeys((r['device'], r['channels'], r['heads'], r['tokens'])
                              for r in rows))
    backend = rows[0]['compiled'] if rows else ''
    lines = ['\nInLineAttention against its own qkv + proj linears'
             + (f', both under torch.compile (backend {backend})' if backend else '')
             + ': median ms, module / linears (wall clock; CPU time in brackets)',
             f'{"device":7s}{"C":>5s}{"heads":>6s}{"tokens":>8s}'
             f'{"linears fwd":>13s}{"module fwd":>12s}{"ratio":>15s}'
             f'{"linears f+b":>13s}{"module f+b":>12s}{"ratio":>15s}']
    for key in keys:
        line = f'{key[0]:7s}{key[1]:5d}{key[2]:6d}{key[3]:8d}'
        for mode in ('forward', 'forward+backward'):
            lin = _median(rows, key, f'linears {mode}')
            mod = _median(rows, key, f'module {mode}')
            lin_c = _median(rows, key, f'linears {mode}', 'cpu_median_ms')
            mod_c = _median(rows, key, f'module {mode}', 'cpu_median_ms')
            cpu = f' [{mod_c / lin_c:.2f}x]' if lin_c and mod_c else ''
            line += f'{lin:13.1f}{mod:12.1f}{f"{mod / lin:.2f}x{cpu}":>15s}'
        lines.append(line)
    return '\n'.join(lines)


def profile_table(prof_rows: List[dict]) -> str:
    lines = ['\nWhat the attention adds to its linears, by aten op (self time of one '
             'profiled step: module minus linears)']
    keys = list(dict.fromkeys((r['device'], r['channels'], r['heads'], r['tokens'], r['mode'])
                              for r in prof_rows))
    for key in keys:
        sel = [r for r in prof_rows
               if (r['device'], r['channels'], r['heads'], r['tokens'], r['mode']) == key]
        lines.append(f'  {key[0]} C={key[1]} heads={key[2]} tokens={key[3]}, {key[4]} '
                     f'(module step {sel[0]["module_total_ms"]:.1f} ms in the profiler):')
        for r in sel:
            lines.append(f'    {r["added_ms"]:8.1f} ms  {r["op"]:32s} {r["input_shapes"][:90]}')
    return '\n'.join(lines)


def write_floor_csv(rows: List[dict], prof_rows: List[dict], path: Path,
                    profile_path: Optional[Path] = None):
    """The timing rows to ``path``, the profile rows (when there are any) to
    ``profile_path``."""
    for data, target in ((rows, path), (prof_rows, profile_path)):
        if not data:
            continue
        with open(target, 'w', newline='') as f:
            w = csv.DictWriter(f, fieldnames=list(data[0]))
            w.writeheader()
            for r in data:
                w.writerow({k: (f'{v:.3f}' if isinstance(v, float) else v)
                            for k, v in r.items()})
