#!/usr/bin/env python
"""Time and peak memory of InLine backbones against their Softmax counterparts.

    python tools/benchmark.py                  # backbones, 224 .. 1536, CPU (+ CUDA if present)
    python tools/benchmark.py --attention      # the attention alone, stage 1 of 800x1333
    python tools/benchmark.py --quick          # CI-sized run of both (seconds)

InLine (Han et al., "Bridging the Divide: Reconsidering Softmax and Linear
Attention", NeurIPS 2024, arXiv 2412.06590) attends over the whole feature map at
linear cost; this tool measures what that buys at detection/segmentation input sizes.

Backbones, compared in one process (random weights, stochastic depth off, batch 1):

  InLine-Swin-T   inline_mm InLineSwin(arch='tiny'): global InLine stages 1-3,
                  window-7 Softmax stage 4
  Swin-T          mmdet SwinTransformer, Swin-T layout, shifted window-7 Softmax
  Swin-T-global   InLine-Swin-T with each InLine attention replaced by global Softmax
                  attention (same qkv/proj, F.scaled_dot_product_attention over all
                  tokens, no position bias): what InLine's global attention replaces
  InLine-PVT-S    inline_mm InLinePVT(arch='small'): global InLine, no spatial reduction
  PVT-S           mmdet PyramidVisionTransformer, PVT-S layout (spatial-reduction
                  Softmax, reduction 8/4/2/1)

For every mode (inference = forward under no_grad; training = forward + backward of
a scalar from all outputs, parameter gradients included) each model is warmed up at
each size, then all (model, size) pairs are timed in ``--repeats`` rounds, every pair
once per round, so that load from other processes hits them alike and ratios
between models and growth between sizes stay meaningful; the median is reported.
Time is wall clock on CPU and CUDA events on CUDA.  Peak memory is measured in one
extra run: on CUDA ``torch.cuda.max_memory_allocated`` minus the memory allocated
before the step; on CPU the running total of tensor allocations minus frees that the
CPU allocator reports to ``torch.profiler(profile_memory=True)`` during the step
(tensor bytes, not RSS).  Both are the memory the step adds on top of the
parameters and the input.  A run predicted (from the model's growth at the smaller
sizes) to exceed ``--max-run-s`` or ``--max-mem-gb`` is skipped and says so.

``--attention`` times InLineAttention (C=96, 3 heads, 200x334 = 66,800 tokens,
stage 1 of an 800x1333 image, projections included) against the plain reference
implementation of the formula kept in ``tests/test_attention.py``, same weights, in
one process, after checking that both give the same result.

Outputs in ``--out-dir``: ``backbones.csv``, ``backbones.png`` (time against pixels,
log-log), ``attention.csv``, ``meta.json`` (machine, versions, load), and the
tables on stdout.
"""
import argparse
import csv
import gc
import importlib.util
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]

FULL_SIZES = [(224, 224), (512, 512), (800, 1333), (1024, 1024), (1536, 1536)]
QUICK_SIZES = [(64, 64), (96, 128)]
MODES = ('inference', 'training')
#: (InLine model, Softmax baseline) pairs whose time ratios are reported.
PAIRS = [('InLine-Swin-T', 'Swin-T'), ('InLine-Swin-T', 'Swin-T-global'),
         ('InLine-PVT-S', 'PVT-S')]
#: The scaling criterion of the issue: forward time growth from 512^2 to 1024^2.
GROWTH_FROM, GROWTH_TO, GROWTH_LIMIT = (512, 512), (1024, 1024), 4.6
ATTENTION_SPEEDUP_TARGET = 1.3


# ----------------------------------------------------------------------------- models

class GlobalSoftmaxAttention(nn.Module):
    """Softmax attention over all ``H * W`` tokens (multi-head, no position bias),
    with the same ``forward(x, hw)`` signature as InLineAttention.

    Args:
        dim (int): Channels.
        num_heads (int): Heads.
    """

    def __init__(self, dim: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, hw: Tuple[int, int]) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(b, n, c))


def build_inline_swin_t():
    from inline_mm.models import InLineSwin
    return InLineSwin(arch='tiny', drop_path_rate=0.)


def build_swin_t():
    from mmdet.models.backbones import SwinTransformer
    return SwinTransformer(embed_dims=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24),
                           window_size=7, drop_path_rate=0.)


def build_swin_t_global():
    from inline_mm.models import InLineAttention
    model = build_inline_swin_t()
    for stage in model.layers:
        for block in stage.blocks:
            if isinstance(block.attn, InLineAttention):
                block.attn = GlobalSoftmaxAttention(block.attn.dim, block.attn.num_heads)
    return model


def build_inline_pvt_s():
    try:
        from inline_mm.models.backbones.inline_pvt import InLinePVT
    except ImportError as e:
        raise ModelUnavailable(f'InLinePVT is not available ({e})') from None
    return InLinePVT(arch='small', drop_path_rate=0.)


def build_pvt_s():
    from mmdet.models.backbones import PyramidVisionTransformer
    return PyramidVisionTransformer(num_layers=[3, 4, 6, 3], drop_path_rate=0.)


class ModelUnavailable(RuntimeError):
    pass


MODELS: Dict[str, Tuple[Callable[[], nn.Module], str]] = {
    'InLine-Swin-T': (build_inline_swin_t, 'InLine'),
    'Swin-T': (build_swin_t, 'Softmax, shifted windows 7x7 (mmdet)'),
    'Swin-T-global': (build_swin_t_global, 'Softmax, global (InLine-Swin-T layout)'),
    'InLine-PVT-S': (build_inline_pvt_s, 'InLine'),
    'PVT-S': (build_pvt_s, 'Softmax, spatial reduction (mmdet)'),
}


# -------------------------------------------------------------------------- measuring

def cpu_peak_bytes(step: Callable[[], None]) -> int:
    """Peak of the tensor bytes allocated during ``step`` and not yet freed, from the
    allocation events the CPU allocator reports to torch.profiler.  Frees of blocks
    that existed before the step (e.g. allocated in an earlier profiled run) are
    ignored, so the figure is what the step itself holds at its worst moment."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / 'trace.json'
        prof.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text())
    events = events['traceEvents'] if isinstance(events, dict) else events
    mem = sorted((e['ts'], e['args'].get('Ev Idx', 0), e['args']['Addr'], e['args']['Bytes'])
                 for e in events
                 if e.get('name') == '[memory]' and e['args'].get('Device Type') == 0)
    live: Dict[int, int] = {}
    total = peak = 0
    for _, _, addr, nbytes in mem:
        if nbytes > 0:
            live[addr] = nbytes
            total += nbytes
            peak = max(peak, total)
        elif addr in live:
            total -= live.pop(addr)
    return peak


class Timer:
    """Wall clock on CPU, CUDA events on CUDA."""

    def __init__(self, device: torch.device):
        self.device = device

    def __call__(self, step: Callable[[], None]) -> float:
        if self.device.type == 'cuda':
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            torch.cuda.synchronize(self.device)
            return start.elapsed_time(end) / 1e3
        t0 = time.perf_counter()
        step()
        return time.perf_counter() - t0

    def peak_bytes(self, step: Callable[[], None]) -> int:
        if self.device.type == 'cuda':
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            base = torch.cuda.memory_allocated(self.device)
            step()
            torch.cuda.synchronize(self.device)
            return torch.cuda.max_memory_allocated(self.device) - base
        return cpu_peak_bytes(step)

    @property
    def mem_method(self) -> str:
        return ('cuda max_memory_allocated - allocated before' if self.device.type == 'cuda'
                else 'torch.profiler CPU tensor allocations (peak of allocated - freed)')


def make_step(model: nn.Module, x: torch.Tensor, mode: str) -> Callable[[], None]:
    """One inference (no_grad forward) or training (forward + backward) step.

    A training step frees its parameter gradients at the end, so that every step
    (and the memory measurement) starts from the same state and allocates them anew,
    as a step after ``optimizer.zero_grad(set_to_none=True)`` does.
    """
    if mode == 'inference':
        def step():
            with torch.no_grad():
                model(x)
    else:
        def step():
            outs = model(x)
            sum(o.float().mean() for o in outs).backward()
            model.zero_grad(set_to_none=True)
    return step


def is_oom(err: BaseException) -> bool:
    text = str(err)
    return isinstance(err, torch.OutOfMemoryError) or 'out of memory' in text.lower() \
        or "can't allocate memory" in text


@dataclass
class Result:
    device: str
    model: str
    mode: str
    size: Tuple[int, int]
    times: List[float] = field(default_factory=list)
    peak_bytes: Optional[int] = None
    status: str = 'ok'

    @property
    def median(self) -> Optional[float]:
        return statistics.median(self.times) if self.times else None

    @property
    def pixels(self) -> int:
        return self.size[0] * self.size[1]


def predict(history: List[Tuple[int, float]], pixels: int) -> Optional[float]:
    """Extrapolate a cost to ``pixels`` from (pixels, cost) at smaller sizes, in
    increasing order of pixels: the growth exponent between the last size and the
    latest one with at most half its pixels (nearby sizes give a noisy exponent),
    clamped to [1, 2.2]; quadratic (the worst a Softmax backbone does) when there is
    no such size."""
    if not history:
        return None
    p1, c1 = history[-1]
    earlier = [(p, c) for p, c in history[:-1] if p <= p1 / 2]
    exp = 2.0
    if earlier and earlier[-1][1] > 0 and c1 > 0:
        p0, c0 = earlier[-1]
        exp = min(2.2, max(1.0, math.log(c1 / c0) / math.log(p1 / p0)))
    return c1 * (pixels / p1) ** exp


# -------------------------------------------------------------------------- backbones

def run_backbones(args, device: torch.device, models: Dict[str, nn.Module],
                  unavailable: Dict[str, str]) -> List[Result]:
    """Per mode: (1) in order of size, predict, skip or warm up each model and measure
    its memory; (2) time every (model, size) left in rounds, all of them once per
    round in a rotating order, so that a change of load shifts every figure alike
    (ratios between models and growth between sizes included)."""
    timer = Timer(device)
    max_mem_gb = args.max_mem_gb or default_max_mem_gb(device)
    results: List[Result] = []
    inputs = {size: torch.randn(args.batch, 3, *size, device=device) for size in args.sizes}
    for mode in args.modes:
        for model in models.values():
            model.train(mode == 'training')
        plan = []
        history: Dict[str, Dict[str, List[Tuple[int, float]]]] = {}
        for size in args.sizes:
            for name in args.models:
                res = Result(device.type, name, mode, size)
                results.append(res)
                if name in unavailable:
                    res.status = f'n/a: {unavailable[name]}'
                    continue
                hist = history.setdefault(name, {'time': [], 'mem': []})
                est_t = predict(hist['time'], res.pixels)
                est_m = predict(hist['mem'], res.pixels)
                if est_t is not None and est_t > args.max_run_s:
                    res.status = f'skipped: est. {est_t:.0f} s > --max-run-s {args.max_run_s:g}'
                elif est_m is not None and est_m > max_mem_gb * 2 ** 30:
                    res.status = (f'skipped: est. {est_m / 2 ** 30:.1f} GiB > --max-mem-gb '
                                  f'{max_mem_gb:.1f}')
                if res.status != 'ok':
                    print(f'  {name:14s} {mode:9s} {_size(size):>9s}  {res.status}', flush=True)
                    continue
                step = make_step(models[name], inputs[size], mode)
                try:
                    probe = [timer(step) for _ in range(args.warmup)]
                    t0 = time.perf_counter()
                    res.peak_bytes = timer.peak_bytes(step)
                    probe.append(time.perf_counter() - t0)
                except RuntimeError as e:
                    if not is_oom(e):
                        raise
                    res.status = 'out of memory'
                    print(f'  {name:14s} {mode:9s} {_size(size):>9s}  {res.status}', flush=True)
                    _free(device)
                    continue
                hist['time'].append((res.pixels, min(probe)))
                hist['mem'].append((res.pixels, res.peak_bytes))
                print(f'  {name:14s} {mode:9s} {_size(size):>9s}  warm-up {min(probe) * 1e3:9.1f} ms'
                      f'  peak {res.peak_bytes / 2 ** 20:8.1f} MiB', flush=True)
                plan.append((res, step))
        print(f'  timing {len(plan)} (model, size) pairs in {args.repeats} interleaved rounds',
              flush=True)
        for rep in range(args.repeats):
            # Rotate the order so that no pair always runs first (or last).
            k = rep % len(plan) if plan else 0
            for res, step in plan[k:] + plan[:k]:
                res.times.append(timer(step))
        for res, _ in plan:
            _report_line(res)
        plan.clear()
        _free(device)
    return results


def _free(device):
    gc.collect()
    if device.type == 'cuda':
        torch.cuda.empty_cache()


def _size(size):
    return f'{size[0]}x{size[1]}'


def _report_line(res: Result):
    print(f'  {res.model:14s} {res.mode:9s} {_size(res.size):>9s}  median {res.median * 1e3:9.1f} ms'
          f'  (min {min(res.times) * 1e3:.1f}, max {max(res.times) * 1e3:.1f}, '
          f'n={len(res.times)})  peak {res.peak_bytes / 2 ** 20:8.1f} MiB', flush=True)


def backbone_tables(results: List[Result], models: Sequence[str]) -> str:
    lines = []
    by_key = {(r.device, r.model, r.mode, r.size): r for r in results}
    devices = sorted({r.device for r in results})
    sizes = sorted({r.size for r in results}, key=lambda s: s[0] * s[1])
    for dev in devices:
        for mode in MODES:
            if not any(r.device == dev and r.mode == mode for r in results):
                continue
            what = 'forward, no_grad' if mode == 'inference' else 'forward + backward'
            lines.append(f'\n{dev.upper()} {mode} ({what}): median ms [peak MiB]')
            lines.append(f'{"size":>10s}' + ''.join(f'{m:>22s}' for m in models))
            for size in sizes:
                row = f'{_size(size):>10s}'
                for m in models:
                    r = by_key.get((dev, m, mode, size))
                    if r is None or r.median is None:
                        cell = '-'
                    else:
                        cell = f'{r.median * 1e3:.0f} [{r.peak_bytes / 2 ** 20:.0f}]'
                    row += f'{cell:>22s}'
                lines.append(row)
            pairs = [(a, b) for a, b in PAIRS if a in models and b in models]
            if pairs:
                lines.append(f'{"":>10s}  time and memory ratios, baseline / InLine '
                             '(> 1: InLine faster / smaller)')
                lines.append(f'{"size":>10s}' + ''.join(f'{b + " / " + a:>34s}' for a, b in pairs))
                for size in sizes:
                    row = f'{_size(size):>10s}'
                    for a, b in pairs:
                        ra, rb = by_key.get((dev, a, mode, size)), by_key.get((dev, b, mode, size))
                        if ra and rb and ra.median and rb.median:
                            cell = (f'{rb.median / ra.median:.2f}x time, '
                                    f'{rb.peak_bytes / max(ra.peak_bytes, 1):.2f}x mem')
                        else:
                            cell = '-'
                        row += f'{cell:>34s}'
                    lines.append(row)
        growth = []
        for m in models:
            r0 = by_key.get((dev, m, 'inference', GROWTH_FROM))
            r1 = by_key.get((dev, m, 'inference', GROWTH_TO))
            if r0 and r1 and r0.median and r1.median:
                growth.append(f'{m} {r1.median / r0.median:.2f}x')
            elif r0 or r1:
                growth.append(f'{m} -')
        if growth:
            lines.append(f'\n{dev.upper()} forward time growth {_size(GROWTH_FROM)} -> '
                         f'{_size(GROWTH_TO)} (4x pixels; 4x is linear): ' + ', '.join(growth))
            r0 = by_key.get((dev, 'InLine-Swin-T', 'inference', GROWTH_FROM))
            r1 = by_key.get((dev, 'InLine-Swin-T', 'inference', GROWTH_TO))
            if r0 and r1 and r0.median and r1.median:
                g = r1.median / r0.median
                lines.append(f'  InLine-Swin-T growth {g:.2f}x vs target <= {GROWTH_LIMIT}x: '
                             f'{"met" if g <= GROWTH_LIMIT else "NOT met"}')
    return '\n'.join(lines)


def write_backbone_csv(results: List[Result], path: Path, args, mem_methods: Dict[str, str]):
    with open(path, 'w', newline='') as f:
        w = csv.writer(f)
        w.writerow(['device', 'model', 'attention', 'mode', 'height', 'width', 'megapixels',
                    'batch', 'threads', 'median_ms', 'min_ms', 'max_ms', 'runs', 'peak_mib',
                    'memory_method', 'status'])
        for r in results:
            ok = r.median is not None
            w.writerow([r.device, r.model, MODELS[r.model][1], r.mode, r.size[0], r.size[1],
                        f'{r.pixels / 1e6:.4f}', args.batch, torch.get_num_threads(),
                        f'{r.median * 1e3:.3f}' if ok else '',
                        f'{min(r.times) * 1e3:.3f}' if ok else '',
                        f'{max(r.times) * 1e3:.3f}' if ok else '', len(r.times),
                        f'{r.peak_bytes / 2 ** 20:.2f}' if r.peak_bytes is not None else '',
                        mem_methods[r.device], r.status])


def plot_backbones(results: List[Result], path: Path, title: str):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    devices = sorted({r.device for r in results})
    fig, axes = plt.subplots(len(devices), len(MODES), figsize=(12, 4.8 * len(devices)),
                             squeeze=False)
    styles = {'InLine-Swin-T': ('tab:blue', 'o', '-'), 'Swin-T': ('tab:orange', 's', '--'),
              'Swin-T-global': ('tab:red', '^', ':'), 'InLine-PVT-S': ('tab:green', 'o', '-'),
              'PVT-S': ('tab:purple', 's', '--')}
    for i, dev in enumerate(devices):
        for j, mode in enumerate(MODES):
            ax = axes[i][j]
            for name in MODELS:
                pts = sorted((r.pixels / 1e6, r.median * 1e3) for r in results
                             if r.device == dev and r.mode == mode and r.model == name
                             and r.median is not None)
                if pts:
                    color, marker, ls = styles[name]
                    ax.plot(*zip(*pts), marker=marker, linestyle=ls, color=color, label=name)
            inline = sorted((r.pixels / 1e6, r.median * 1e3) for r in results
                            if r.device == dev and r.mode == mode and r.median is not None
                            and r.model == 'InLine-Swin-T')
            if len(inline) > 1:
                (p0, t0), p1 = inline[0], inline[-1][0]
                ax.plot([p0, p1], [t0, t0 * p1 / p0], color='0.6', linewidth=0.8,
                        label='linear in pixels (from InLine-Swin-T)')
            ax.set_xscale('log')
            ax.set_yscale('log')
            ax.set_xlabel('input megapixels')
            ax.set_ylabel('median time per image (ms)')
            ax.set_title(f'{dev.upper()} {mode}')
            ax.grid(True, which='both', alpha=0.3)
            ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -------------------------------------------------------------------------- attention

def load_reference():
    """``reference_attention`` from tests/test_attention.py (the formula, plainly)."""
    path = ROOT / 'tests' / 'test_attention.py'
    if not path.is_file():
        raise SystemExit(f'--attention compares against the reference in {path}, which is '
                         'missing; run from a checkout of the repository')
    threads = torch.get_num_threads()
    sys.path.insert(0, str(path.parent))
    try:
        spec = importlib.util.spec_from_file_location('inline_mm_attention_reference', path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
        torch.set_num_threads(threads)        # tests/conftest.py sets its own count
    return module.reference_attention


def run_attention(args, device: torch.device) -> List[dict]:
    from inline_mm.models import InLineAttention
    reference = load_reference()
    timer = Timer(device)
    h, w = args.attention_hw
    c, heads = 96, 3
    torch.manual_seed(0)
    attn = InLineAttention(c, heads).to(device)
    x = torch.randn(args.batch, h * w, c, device=device)
    grad = torch.randn_like(x)
    paths = {'production (InLineAttention)': lambda t: attn(t, (h, w)),
             'reference (tests/test_attention.py)': lambda t: reference(attn, t, (h, w))}
    with torch.no_grad():
        outs = [fn(x) for fn in paths.values()]
    err = ((outs[0] - outs[1]).abs().max() / outs[1].abs().max()).item()
    del outs
    print(f'\nattention: C={c}, {heads} heads, {h}x{w} = {h * w} tokens, batch {args.batch}, '
          f'{device.type}; production vs reference max rel. error {err:.1e}')
    if err > 1e-4:
        raise SystemExit('production and reference attention disagree; not timing them')

    def step_for(fn, mode):
        if mode == 'inference':
            def step():
                with torch.no_grad():
                    fn(x)
        else:
            def step():
                fn(x.detach().requires_grad_()).backward(grad)
                attn.zero_grad(set_to_none=True)
        return step

    rows = []
    for mode in args.modes:
        steps = {name: step_for(fn, mode) for name, fn in paths.items()}
        times = {name: [] for name in paths}
        for step in steps.values():
            for _ in range(args.warmup):
                timer(step)
        names = list(paths)
        for rep in range(args.attention_repeats):
            order = names if rep % 2 == 0 else names[::-1]
            for name in order:
                times[name].append(timer(steps[name]))
        for name in names:
            rows.append(dict(device=device.type, mode=mode, path=name, tokens=h * w,
                             height=h, width=w, channels=c, heads=heads, batch=args.batch,
                             threads=torch.get_num_threads(),
                             median_ms=statistics.median(times[name]) * 1e3,
                             min_ms=min(times[name]) * 1e3, max_ms=max(times[name]) * 1e3,
                             runs=len(times[name]),
                             peak_mib=timer.peak_bytes(steps[name]) / 2 ** 20,
                             memory_method=timer.mem_method))
    return rows


def attention_table(rows: List[dict], verdict: bool = True) -> str:
    lines = []
    for dev in sorted({r['device'] for r in rows}):
        lines.append(f'\n{dev.upper()} attention: median ms (min-max) [peak MiB]')
        for mode in MODES:
            sel = [r for r in rows if r['device'] == dev and r['mode'] == mode]
            if not sel:
                continue
            what = 'forward' if mode == 'inference' else 'forward + backward'
            for r in sel:
                lines.append(f'  {what:18s} {r["path"]:36s} {r["median_ms"]:8.1f} '
                             f'({r["min_ms"]:.1f}-{r["max_ms"]:.1f}, n={r["runs"]}) '
                             f'[{r["peak_mib"]:.1f}]')
            prod = next(r for r in sel if r['path'].startswith('production'))
            ref = next(r for r in sel if r['path'].startswith('reference'))
            speedup = ref['median_ms'] / prod['median_ms']
            line = (f'  {what:18s} speed-up reference / production {speedup:.2f}x, '
                    f'peak memory production / reference '
                    f'{prod["peak_mib"] / ref["peak_mib"]:.2f}x')
            if mode == 'training' and verdict:
                ok = speedup >= ATTENTION_SPEEDUP_TARGET and prod['peak_mib'] <= ref['peak_mib']
                line += (f'  (target >= {ATTENTION_SPEEDUP_TARGET}x and not more memory: '
                         f'{"met" if ok else "NOT met"})')
            lines.append(line)
    return '\n'.join(lines)


def write_attention_csv(rows: List[dict], path: Path):
    with open(path, 'w', newline='') as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            w.writerow({k: (f'{v:.3f}' if isinstance(v, float) else v) for k, v in r.items()})


# ----------------------------------------------------------------------------- driver

def machine_info() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path('/proc/cpuinfo').read_text().splitlines():
            if line.startswith('model name'):
                cpu = line.split(':', 1)[1].strip()
                break
    except OSError:
        pass
    info = dict(cpu=cpu, logical_cores=os.cpu_count(), torch_threads=torch.get_num_threads(),
                torch=torch.__version__, python=platform.python_version(),
                cuda=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
    if hasattr(os, 'getloadavg'):
        info['load_average_start'] = os.getloadavg()
    # Settings that change CPU timings a lot (threads, the allocator: see README).
    info['environment'] = {k: v for k, v in os.environ.items()
                           if k.startswith(('OMP_', 'MKL_', 'MALLOC_', 'THP_', 'LD_PRELOAD'))}
    return info


def default_max_mem_gb(device: torch.device) -> float:
    """Half the memory available now (CPU), 90 % of the free memory (CUDA)."""
    if device.type == 'cuda':
        return torch.cuda.mem_get_info(device)[0] / 2 ** 30 * 0.9
    try:
        for line in Path('/proc/meminfo').read_text().splitlines():
            if line.startswith('MemAvailable:'):
                return int(line.split()[1]) / 2 ** 20 / 2
    except OSError:
        pass
    return 4.0


def parse_size(text: str) -> Tuple[int, int]:
    try:
        parts = [int(p) for p in text.lower().split('x')]
    except ValueError:
        parts = []
    if len(parts) == 1:
        parts = parts * 2
    if len(parts) != 2 or min(parts) < 32:
        raise argparse.ArgumentTypeError(f'size {text!r}: use N or HxW with sides >= 32, '
                                         'e.g. 512 or 800x1333')
    return parts[0], parts[1]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog='See the module docstring for what is measured and how.')
    p.add_argument('--quick', action='store_true',
                   help='CI-sized run: backbones at 64x64 and 96x128 and the attention on a '
                        '24x40 map, 2 repeats (checks that everything runs; the timings mean '
                        'little)')
    p.add_argument('--attention', action='store_true',
                   help='only the attention comparison (production vs reference)')
    p.add_argument('--sizes', nargs='+', type=parse_size, default=None,
                   help='input sizes, N or HxW (default: 224 512 800x1333 1024 1536)')
    p.add_argument('--models', nargs='+', choices=list(MODELS), default=list(MODELS),
                   help='backbones to compare (default: all)')
    p.add_argument('--modes', nargs='+', choices=MODES, default=list(MODES))
    p.add_argument('--device', choices=['auto', 'cpu', 'cuda', 'all'], default='auto',
                   help='auto: CUDA when present, else CPU; all: CPU and CUDA')
    p.add_argument('--batch', type=int, default=1)
    p.add_argument('--repeats', type=int, default=None,
                   help='timed runs per model and size (default 5; --quick 2)')
    p.add_argument('--attention-repeats', type=int, default=None,
                   help='timed runs per attention path (default 9; --quick 2)')
    p.add_argument('--warmup', type=int, default=1, help='untimed runs first (default 1)')
    p.add_argument('--threads', type=int, default=None,
                   help='torch CPU threads (default: torch\'s own, which follows '
                        'OMP_NUM_THREADS)')
    p.add_argument('--max-run-s', type=float, default=None,
                   help='skip a size whose predicted single run takes longer (default 30; '
                        '--quick 20)')
    p.add_argument('--max-mem-gb', type=float, default=None,
                   help='skip a size whose predicted peak memory is larger (default: half '
                        'of the available memory)')
    p.add_argument('--out-dir', type=Path, default=ROOT / 'work_dirs' / 'benchmark')
    args = p.parse_args(argv)
    if args.batch < 1 or args.warmup < 0:
        p.error('--batch must be >= 1 and --warmup >= 0')
    if args.sizes is None:
        args.sizes = QUICK_SIZES if args.quick else FULL_SIZES
    args.sizes = sorted(args.sizes, key=lambda s: s[0] * s[1])
    args.repeats = args.repeats or (2 if args.quick else 5)
    args.attention_repeats = args.attention_repeats or (2 if args.quick else 9)
    if args.repeats < 1 or args.attention_repeats < 1:
        p.error('--repeats and --attention-repeats must be >= 1')
    args.max_run_s = args.max_run_s or (20. if args.quick else 30.)
    args.attention_hw = (6, 10) if args.quick else (-(-800 // 4), -(-1333 // 4))
    return args


def devices_for(choice: str) -> List[torch.device]:
    cuda = torch.cuda.is_available()
    if choice == 'cuda' and not cuda:
        raise SystemExit('--device cuda: no CUDA device is visible to torch')
    if choice == 'cpu' or (choice == 'auto' and not cuda):
        return [torch.device('cpu')]
    if choice in ('cuda', 'auto'):
        return [torch.device('cuda')]
    return [torch.device('cpu')] + ([torch.device('cuda')] if cuda else [])


def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    import inline_mm  # noqa: F401  (registers the backbones; fails early if not installed)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    info = machine_info()
    devices = devices_for(args.device)
    print(f'machine: {info["cpu"]}, {info["logical_cores"]} logical cores, torch '
          f'{info["torch"]} with {info["torch_threads"]} thread(s)'
          + (f', GPU {info["cuda"]}' if info['cuda'] else '')
          + (f'; load average {info["load_average_start"][0]:.2f}'
             if 'load_average_start' in info else ''))
    if info['environment']:
        print('environment: ' + ', '.join(f'{k}={v}' for k, v in info['environment'].items()))
    print('timings are medians of interleaved runs; other processes on a shared machine '
          'still add noise')
    run_backbone_part = not args.attention
    run_attention_part = args.attention or args.quick

    outputs = []
    if run_backbone_part:
        results: List[Result] = []
        mem_methods = {}
        for device in devices:
            models, unavailable = {}, {}
            for name in args.models:
                try:
                    models[name] = MODELS[name][0]().to(device)
                except ModelUnavailable as e:
                    unavailable[name] = str(e)
                    print(f'{name}: skipped, {e}')
            print(f'\n{device.type.upper()}: sizes {", ".join(_size(s) for s in args.sizes)}; '
                  f'{args.warmup} warm-up + {args.repeats} timed runs each, batch {args.batch}')
            results += run_backbones(args, device, models, unavailable)
            mem_methods[device.type] = Timer(device).mem_method
            del models
            _free(device)
        print(backbone_tables(results, args.models))
        csv_path = args.out_dir / 'backbones.csv'
        write_backbone_csv(results, csv_path, args, mem_methods)
        png_path = args.out_dir / 'backbones.png'
        title = (f'{info["cpu"]}, torch {info["torch"]}, {torch.get_num_threads()} thread(s), '
                 f'batch {args.batch}' + (f', GPU {info["cuda"]}' if info['cuda'] else ''))
        plot_backbones(results, png_path, title)
        outputs += [csv_path, png_path]
    if run_attention_part:
        rows = []
        for device in devices:
            rows += run_attention(args, device)
        # The criterion is about the full-size map; a quick run only shows it works.
        print(attention_table(rows, verdict=not args.quick))
        att_path = args.out_dir / 'attention.csv'
        write_attention_csv(rows, att_path)
        outputs.append(att_path)
    if hasattr(os, 'getloadavg'):
        info['load_average_end'] = os.getloadavg()
    info['arguments'] = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    meta = args.out_dir / 'meta.json'
    meta.write_text(json.dumps(info, indent=2, default=str))
    outputs.append(meta)
    print('\nwrote ' + ', '.join(str(p) for p in outputs))


if __name__ == '__main__':
    main()
