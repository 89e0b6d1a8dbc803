"""The cost of padding awareness (``python -m benchmarks --padding``).

mmdet and mmseg batch images of different sizes by zero-padding them at the bottom and
right to a common canvas (a multiple of 32 in the shipped detection configs). A
padding-aware backbone (``pad_aware=True``, the default) reads each image's region
from the input and computes every statistic over it alone; ``pad_aware=False`` runs
over the whole canvas as before. This measures what the first costs over the second:

* backbones: every family of :data:`inline_mm.models.FAMILIES` at its ``tiny`` preset
  (``--quick``: its ``smoke`` configuration), random weights, stochastic depth off;
  one model per family, switched between the two variants by ``model.pad_aware``, so
  both run the same weights;
* a batch of ``--batch`` images (default 2) on the canvas of each size, the size
  rounded up to a multiple of :data:`DIVISOR` (800x1333 -> 800x1344), random normal
  content (never exactly 0, so only the padding reads as padding);
* conditions: ``none``, every image fills the canvas (the aware model then only
  checks the last row and column of each image and runs the plain code: its cost
  must be near zero); ``padded``, image 0 fills the canvas and every other image is
  :data:`SMALLER` of the size on each side, rounded down (800x1333 -> 600x999,
  1024x1024 -> 768x768), zero-padded into it: a realistic mmdet batch;
* modes: inference (eval mode, forward under ``no_grad``) and training (train mode,
  forward + backward of the mean of every output; the parameter gradients are
  allocated anew at each step).

For each (family, size, condition, mode) the two variants are warmed up, their peak
memory measured once, then timed in ``--repeats`` rounds, one run of each per round,
alternating which goes first (A B, B A, ...), so a change of load hits both alike.
Timing and memory come from :mod:`.measure` (wall clock on CPU, CUDA events on CUDA;
on CPU also the CPU time of the process, which waiting for a core does not inflate).
Reported: medians, aware / plain (time, CPU time and memory), and the range of the
per-round ratios (how far the noise of the machine reaches). Before timing, each batch is checked
to be what its condition says: the aware model reads padding from a ``padded`` batch and
none from a ``none`` batch.
"""
import csv
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from inline_mm.models import FAMILIES
from .backbones import MODES, _size
from .measure import Timed, Timer, free_memory, is_oom, make_step

__all__ = ['FULL_SIZES', 'QUICK_SIZES', 'CONDITIONS', 'VARIANTS', 'DIVISOR', 'SMALLER',
           'SWEEP_CASES', 'SWEEP_FRACTIONS', 'sweep_cases',
           'Measurement', 'canvas', 'image_sizes', 'make_batch', 'build_model',
           'check_condition', 'run',
           'padding_table', 'write_csv']

FULL_SIZES = [(800, 1333), (1024, 1024)]
QUICK_SIZES = [(64, 96), (96, 128)]
CONDITIONS = ('none', 'padded')
#: variant name -> ``pad_aware``
VARIANTS = {'plain': False, 'aware': True}
#: mmdet's ``pad_size_divisor`` in the shipped detection configs
DIVISOR = 32
#: side of the smaller images of a ``padded`` batch, as a fraction of the size
SMALLER = 3 / 4
#: ``--sweep``: (canvas, batch) cases, each with the second image at every fraction of
#: :data:`SWEEP_FRACTIONS` of each side (condition ``second<a>/<b>``), the others full
SWEEP_CASES = [((800, 1344), 2), ((512, 768), 4)]
QUICK_SWEEP_CASES = [((64, 96), 2), ((64, 96), 4)]
SWEEP_FRACTIONS = ('1/2', '3/4', '15/16')


def canvas(size: Tuple[int, int]) -> Tuple[int, int]:
    """The batch map of ``size``: each side rounded up to a multiple of :data:`DIVISOR`."""
    return tuple(-(-s // DIVISOR) * DIVISOR for s in size)


def image_sizes(size: Tuple[int, int], condition: str, batch: int) -> List[Tuple[int, int]]:
    """Each image's ``(h, w)`` on the canvas of ``size`` under ``condition``."""
    full = canvas(size)
    if condition == 'none':
        return [full] * batch
    if condition == 'padded':
        return [full] + [(int(size[0] * SMALLER), int(size[1] * SMALLER))] * (batch - 1)
    if condition.startswith('second') and condition[6:] in SWEEP_FRACTIONS:
        num, den = map(int, condition[6:].split('/'))
        return [full, (size[0] * num // den, size[1] * num // den)] + [full] * (batch - 2)
    raise ValueError(f'condition must be one of {CONDITIONS} or second<fraction> with a '
                     f'fraction of {SWEEP_FRACTIONS}, got {condition!r}')


def sweep_cases(quick: bool = False) -> List[Tuple[Tuple[int, int], int, str]]:
    """``--sweep``: (size, batch, condition) of every case: each of :data:`SWEEP_CASES`
    (:data:`QUICK_SWEEP_CASES`) with the second image at each of :data:`SWEEP_FRACTIONS`."""
    return [(size, batch, f'second{f}') for size, batch in
            (QUICK_SWEEP_CASES if quick else SWEEP_CASES) for f in SWEEP_FRACTIONS]


def make_batch(size: Tuple[int, int], condition: str, batch: int,
               device: torch.device = torch.device('cpu')) -> torch.Tensor:
    """``(batch, 3, *canvas(size))``: random normal images, zero outside each image's
    region (what mmdet's data preprocessor writes after normalisation)."""
    x = torch.randn(batch, 3, *canvas(size), device=device)
    for i, (h, w) in enumerate(image_sizes(size, condition, batch)):
        x[i, :, h:] = 0
        x[i, :, :, w:] = 0
    return x


def build_model(family: str, quick: bool) -> nn.Module:
    """``family`` at its ``tiny`` preset, or its ``smoke`` configuration with
    ``quick``; stochastic depth off either way."""
    entry = FAMILIES[family]
    if quick:
        return entry.cls(**dict(entry.smoke, drop_path_rate=0.))
    return entry.cls(arch='tiny', drop_path_rate=0.)


@dataclass
class Measurement(Timed):
    device: str
    family: str
    arch: str
    mode: str
    size: Tuple[int, int]
    condition: str
    variant: str
    images: List[Tuple[int, int]]
    times: List[float] = field(default_factory=list)
    cpu_times: List[float] = field(default_factory=list)
    peak_bytes: Optional[int] = None
    status: str = 'ok'

    @property
    def cpu_median(self) -> Optional[float]:
        return statistics.median(self.cpu_times) if self.cpu_times else None

    @property
    def images_text(self) -> str:
        return '+'.join(_size(s) for s in self.images)


def check_condition(model: nn.Module, x: torch.Tensor, condition: str):
    """Refuse a batch the aware model does not read as ``condition`` says (the
    benchmark would time the wrong code path)."""
    aware = model.pad_aware
    model.pad_aware = True
    try:
        with torch.no_grad():
            valid = model.valid_map(x)
    finally:
        model.pad_aware = aware
    # On the batched path a map is made whatever the sizes: read them.
    hw = tuple(x.shape[-2:])
    padded = valid.is_padded and any(tuple(s) != hw for s in valid.host_sizes())
    if padded != (condition != 'none'):
        raise RuntimeError(f'a {condition!r} batch of {tuple(x.shape)} was read as '
                           f'{valid!r} by {type(model).__name__}: the benchmark would not time '
                           'what it says')


def _variant_step(model: nn.Module, x: torch.Tensor, mode: str, aware: bool):
    step = make_step(model, x, mode)

    def run():
        model.pad_aware = aware
        step()
    return run


def _measure_pair(args, timer: Timer, model: nn.Module, x: torch.Tensor,
                  pair: Dict[str, Measurement]):
    """Warm up and measure the memory of both variants, then time them in rounds of
    one run each, alternating which runs first."""
    mode = next(iter(pair.values())).mode
    steps = {v: _variant_step(model, x, mode, aware) for v, aware in VARIANTS.items()}
    try:
        for v, step in steps.items():
            for _ in range(args.warmup):
                timer(step)
            pair[v].peak_bytes = timer.peak_bytes(step)
        order = list(VARIANTS)
        for rep in range(args.repeats):
            for v in (order if rep % 2 == 0 else order[::-1]):
                pair[v].times.append(timer(steps[v]))
                if timer.last_cpu is not None:
                    pair[v].cpu_times.append(timer.last_cpu)
    except RuntimeError as e:
        if not is_oom(e):
            raise
        for m in pair.values():
            m.status, m.times, m.cpu_times, m.peak_bytes = 'out of memory', [], [], None
        free_memory(timer.device)


def run(args, device: torch.device) -> List[Measurement]:
    """Every (family, mode, size, condition) of ``args`` on ``device``, both variants.

    ``args``: ``models`` (family names), ``modes``, ``sizes``, ``conditions``,
    ``batch``, ``warmup``, ``repeats``, ``quick``; with ``sweep`` (true) the cases of
    :func:`sweep_cases` instead of ``sizes`` x ``conditions`` at ``batch``.
    """
    cases = sweep_cases(args.quick) if getattr(args, 'sweep', False) else \
        [(size, args.batch, condition) for size in args.sizes for condition in args.conditions]
    timer = Timer(device)
    arch = 'smoke' if args.quick else 'tiny'
    results: List[Measurement] = []
    for family in args.models:
        torch.manual_seed(0)
        model = build_model(family, args.quick).to(device)
        for mode in args.modes:
            model.train(mode == 'training')
            for size, batch, condition in cases:
                x = make_batch(size, condition, batch, device)
                check_condition(model, x, condition)
                images = image_sizes(size, condition, batch)
                pair = {v: Measurement(device.type, family, arch, mode, size, condition, v,
                                       images) for v in VARIANTS}
                _measure_pair(args, timer, model, x, pair)
                results += pair.values()
                _report_line(pair)
                del x
        del model
        free_memory(device)
    return results


def _ratios(pair: Dict[str, Measurement]):
    """(aware / plain of the wall-clock medians, of the peak memory, per-round (min,
    max), aware / plain of the CPU-time medians or None)."""
    plain, aware = pair['plain'], pair['aware']
    if plain.median is None or aware.median is None:
        return None
    rounds = [a / p for a, p in zip(aware.times, plain.times)]
    cpu = aware.cpu_median / plain.cpu_median if plain.cpu_times and aware.cpu_times else None
    return (aware.median / plain.median, aware.peak_bytes / max(plain.peak_bytes, 1),
            (min(rounds), max(rounds)), cpu)


def _report_line(pair: Dict[str, Measurement]):
    m = pair['plain']
    head = (f'  {m.family:12s} {m.mode:9s} {_size(canvas(m.size)):>9s} {m.condition:11s}'
            f' B={len(m.images)}')
    ratios = _ratios(pair)
    if ratios is None:
        print(f'{head} {m.status}', flush=True)
        return
    time_ratio, _, (lo, hi), cpu = ratios
    print(f'{head} plain {m.median * 1e3:9.1f} ms  aware {pair["aware"].median * 1e3:9.1f} ms'
          f'  aware/plain {time_ratio:.3f} (rounds {lo:.3f}-{hi:.3f}, n={len(m.times)})'
          + (f'  CPU time {cpu:.3f}' if cpu is not None else ''), flush=True)


def _pairs(results: Sequence[Measurement]) -> Dict[tuple, Dict[str, Measurement]]:
    pairs: Dict[tuple, Dict[str, Measurement]] = {}
    for r in results:
        pairs.setdefault((r.device, r.family, r.mode, r.size, r.condition), {})[r.variant] = r
    return pairs


def padding_table(results: Sequence[Measurement]) -> str:
    pairs = _pairs(results)
    lines = []
    for dev in sorted({r.device for r in results}):
        for mode in MODES:
            keys = [k for k in pairs if k[0] == dev and k[2] == mode]
            if not keys:
                continue
            what = 'forward, no_grad' if mode == 'inference' else 'forward + backward'
            lines.append(f'\n{dev.upper()} {mode} ({what}): median ms [peak MiB], '
                         'plain = pad_aware=False, aware = pad_aware=True')
            lines.append(f'{"family":12s}{"canvas":>10s}  {"condition":12s}{"images":>30s}'
                         f'{"plain":>16s}{"aware":>16s}{"aware/plain":>13s}{"rounds":>15s}'
                         f'{"CPU time":>10s}{"memory":>8s}')
            for key in keys:
                pair = pairs[key]
                m = pair['plain']
                row = (f'{m.family:12s}{_size(canvas(m.size)):>10s}  {m.condition:12s}'
                       f'{m.images_text:>30s}')
                ratios = _ratios(pair)
                if ratios is None:
                    lines.append(row + f'{m.status:>16s}')
                    continue
                time_ratio, mem_ratio, (lo, hi), cpu = ratios
                for v in VARIANTS:
                    r = pair[v]
                    row += f'{f"{r.median * 1e3:.0f} [{r.peak_bytes / 2 ** 20:.0f}]":>16s}'
                cpu_text = '-' if cpu is None else f'{cpu:.3f}x'
                row += (f'{time_ratio:>12.3f}x{f"{lo:.2f}-{hi:.2f}":>15s}{cpu_text:>10s}'
                        f'{mem_ratio:>7.2f}x')
                lines.append(row)
            lines.append('  aware/plain: ratio of the wall-clock medians (> 1: padding '
                         'awareness costs time); rounds: range of the ratio within each '
                         'interleaved round; CPU time: ratio of the medians of the CPU time '
                         'the process spent (immune to waiting for a core); memory: ratio '
                         'of the peaks')
    return '\n'.join(lines)


def write_csv(results: Sequence[Measurement], path: Path, batch: int,
              mem_methods: Dict[str, str]):
    pairs = _pairs(results)
    with open(path, 'w', newline='') as f:
        w = csv.writer(f)
        w.writerow(['device', 'family', 'arch', 'mode', 'height', 'width', 'canvas_height',
                    'canvas_width', 'condition', 'images', 'pad_aware', 'batch', 'threads',
                    'median_ms', 'min_ms', 'max_ms', 'runs', 'peak_mib', 'time_vs_plain',
                    'cpu_median_ms', 'cpu_time_vs_plain', 'memory_vs_plain', 'memory_method',
                    'status'])
        for r in results:
            ok = r.median is not None
            plain = pairs[(r.device, r.family, r.mode, r.size, r.condition)]['plain']
            w.writerow([r.device, r.family, r.arch, r.mode, r.size[0], r.size[1],
                        *canvas(r.size), r.condition, r.images_text, VARIANTS[r.variant],
                        len(r.images), torch.get_num_threads(),
                        f'{r.median * 1e3:.3f}' if ok else '',
                        f'{min(r.times) * 1e3:.3f}' if ok else '',
                        f'{max(r.times) * 1e3:.3f}' if ok else '', len(r.times),
                        f'{r.peak_bytes / 2 ** 20:.2f}' if r.peak_bytes is not None else '',
                        f'{r.median / plain.median:.4f}' if ok else '',
                        f'{r.cpu_median * 1e3:.3f}' if r.cpu_times else '',
                        f'{r.cpu_median / plain.cpu_median:.4f}'
                        if r.cpu_times and plain.cpu_times else '',
                        f'{r.peak_bytes / max(plain.peak_bytes, 1):.4f}' if ok else '',
                        mem_methods[r.device], r.status])
