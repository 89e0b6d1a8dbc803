"""Measuring one step: wall-clock or CUDA-event time, peak memory, and the cost
predicted at a larger size (to skip what would take too long)."""
import csv
import gc
import json
import math
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import torch
import torch.nn as nn

__all__ = ['cpu_peak_bytes', 'Timer', 'make_step', 'is_oom', 'predict', 'machine_info',
           'default_max_mem_gb', 'free_memory']


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


class Timed:
    """For a record with a ``times`` list: its ``median`` (None before the first time)."""

    @property
    def median(self) -> Optional[float]:
        return statistics.median(self.times) if self.times else None


class Timer:
    """Wall clock on CPU, CUDA events on CUDA.

    On CPU each call also records :attr:`last_cpu`, the CPU seconds the process spent
    in the step (``time.process_time``): with one torch thread it leaves out the time
    the step waited for a core while other processes ran, the largest part of the
    noise of a shared machine (it still includes their effect on caches and memory
    bandwidth). CUDA: None.
    """

    def __init__(self, device: torch.device):
        self.device = device
        self.last_cpu: Optional[float] = None

    def __call__(self, step: Callable[[], None]) -> float:
        if self.device.type == 'cuda':
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            torch.cuda.synchronize(self.device)
            self.last_cpu = None
            return start.elapsed_time(end) / 1e3
        c0, t0 = time.process_time(), time.perf_counter()
        step()
        wall = time.perf_counter() - t0
        self.last_cpu = time.process_time() - c0
        return wall

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
    # Settings that change CPU timings a lot (threads, the allocator: see docs/performance.md).
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


def free_memory(device: torch.device):
    gc.collect()
    if device.type == 'cuda':
        torch.cuda.empty_cache()


def write_dict_rows(rows: List[dict], path: Path):
    """Rows of dicts (one key set) as a CSV, floats to 3 decimals."""
    with open(path, 'w', newline='') as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            w.writerow({k: (f'{v:.3f}' if isinstance(v, float) else v) for k, v in r.items()})


def interleaved_times(timer, steps: Dict[str, Callable[[], None]], warmup: int,
                      repeats: int) -> Dict[str, List[float]]:
    """Seconds per run of each named step: ``warmup`` untimed runs each, then ``repeats``
    rounds that time every step once, each round starting one step further on, so that a
    drift of the machine (heat, other processes) falls on all of them alike."""
    for step in steps.values():
        for _ in range(warmup):
            timer(step)
    names = list(steps)
    times: Dict[str, List[float]] = {name: [] for name in names}
    for rep in range(repeats):
        k = rep % len(names)
        for name in names[k:] + names[:k]:
            times[name].append(timer(steps[name]))
    return times


def time_stats(times: List[float]) -> dict:
    """Median, min and max ms and the number of runs of a list of seconds (a CSV row's)."""
    return dict(median_ms=statistics.median(times) * 1e3, min_ms=min(times) * 1e3,
                max_ms=max(times) * 1e3, runs=len(times))
