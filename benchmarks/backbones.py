"""Whole backbones against the Softmax backbones InLine replaces: time and peak memory
per (model, size, mode), timed in interleaved rounds (``python -m benchmarks``).

Models, compared in one process (random weights, stochastic depth off):

  InLine-Swin-T   InLineSwin(arch='tiny'): global InLine stages 1-3, window-7 Softmax
                  stage 4
  Swin-T          mmdet SwinTransformer, Swin-T layout, shifted window-7 Softmax
  Swin-T-global   InLine-Swin-T with each InLine attention replaced by global Softmax
                  attention (same qkv/proj, no position bias): what InLine's global
                  attention replaces
  InLine-PVT-S    InLinePVT(arch='small'): global InLine, no spatial reduction
  PVT-S           mmdet PyramidVisionTransformer, PVT-S layout (spatial-reduction
                  Softmax, reduction 8/4/2/1)
"""
import csv
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from inline_mm.models import InLineAttention, InLinePVT, InLineSwin
from inline_mm.models.padding import NO_PADDING, ValidMap
from .measure import Timed, Timer, default_max_mem_gb, free_memory, is_oom, make_step, predict

__all__ = ['MODELS', 'MODES', 'PAIRS', 'FULL_SIZES', 'QUICK_SIZES', 'GROWTH_FROM', 'GROWTH_TO',
           'Result', 'build_models', 'run_backbones', 'sizes_of', 'mode_sections',
           'backbone_tables', 'TIMING_COLUMNS', 'timing_cells', 'write_backbone_csv', 'STYLES',
           'log_log_axes', 'save_figure', 'plot_backbones']

FULL_SIZES = [(224, 224), (512, 512), (800, 1333), (1024, 1024), (1536, 1536)]
QUICK_SIZES = [(64, 64), (96, 128)]
MODES = ('inference', 'training')
#: (InLine model, Softmax baseline) pairs whose time ratios are reported.
PAIRS = [('InLine-Swin-T', 'Swin-T'), ('InLine-Swin-T', 'Swin-T-global'),
         ('InLine-PVT-S', 'PVT-S')]
#: forward time growth between these sizes (4x the pixels) is reported for every model
GROWTH_FROM, GROWTH_TO = (512, 512), (1024, 1024)


def build_inline_swin_t() -> nn.Module:
    return InLineSwin(arch='tiny', drop_path_rate=0.)


def build_swin_t() -> nn.Module:
    from mmdet.models.backbones import SwinTransformer
    return SwinTransformer(embed_dims=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24),
                           window_size=7, drop_path_rate=0.)


class GlobalSoftmaxAttention(nn.Module):
    """Softmax attention over all ``H * W`` tokens (multi-head, no position bias): what
    InLine's global attention replaces, at quadratic cost (the benchmark's baseline).

    Args:
        dim (int): Channels.
        num_heads (int): Heads.
        qkv_bias (bool): Default: True.
        attn_drop (float): Dropout on attention weights. Default: 0.
        proj_drop (float): Dropout after the projection. Default: 0.
    """

    def __init__(self, dim: int, num_heads: int, qkv_bias: bool = True, attn_drop: float = 0.,
                 proj_drop: float = 0.):
        super().__init__()
        if dim % num_heads:
            raise ValueError(f'dim ({dim}) must be divisible by num_heads ({num_heads})')
        self.dim, self.num_heads = dim, num_heads
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = attn_drop
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def extra_repr(self) -> str:
        return f'dim={self.dim}, num_heads={self.num_heads}'

    def forward(self, x: torch.Tensor, hw: Tuple[int, int],
                token_mean: Optional[torch.Tensor] = None,
                valid: ValidMap = NO_PADDING) -> torch.Tensor:
        """The call of ``inline_mm.models.attention``."""
        b, n, c = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        # Keys outside each image are masked (every image has a valid key: no empty row).
        mask = valid.key_mask()
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=self.attn_drop if self.training else 0.)
        return self.proj_drop(self.proj(out.transpose(1, 2).reshape(b, n, c)))


def build_swin_t_global() -> nn.Module:
    model = build_inline_swin_t()
    for stage in model.layers:
        for block in stage.blocks:
            if isinstance(block.attn, InLineAttention):
                block.attn = GlobalSoftmaxAttention(block.attn.dim, block.attn.num_heads)
    return model


def build_inline_pvt_s() -> nn.Module:
    return InLinePVT(arch='small', drop_path_rate=0.)


def build_pvt_s() -> nn.Module:
    from mmdet.models.backbones import PyramidVisionTransformer
    return PyramidVisionTransformer(num_layers=[3, 4, 6, 3], drop_path_rate=0.)


#: name -> (builder, what its attention is)
MODELS: Dict[str, Tuple[Callable[[], nn.Module], str]] = {
    'InLine-Swin-T': (build_inline_swin_t, 'InLine'),
    'Swin-T': (build_swin_t, 'Softmax, shifted windows 7x7 (mmdet)'),
    'Swin-T-global': (build_swin_t_global, 'Softmax, global (InLine-Swin-T layout)'),
    'InLine-PVT-S': (build_inline_pvt_s, 'InLine'),
    'PVT-S': (build_pvt_s, 'Softmax, spatial reduction (mmdet)'),
}


def build_models(names: Sequence[str], device: torch.device) -> Dict[str, nn.Module]:
    return {name: MODELS[name][0]().to(device) for name in names}


@dataclass
class Result(Timed):
    device: str
    model: str
    mode: str
    size: Tuple[int, int]
    times: List[float] = field(default_factory=list)
    peak_bytes: Optional[int] = None
    status: str = 'ok'

    @property
    def pixels(self) -> int:
        return self.size[0] * self.size[1]


def run_backbones(args, device: torch.device, models: Dict[str, nn.Module],
                  probe: bool = False) -> List[Result]:
    """Per mode: (1) in order of size, predict, skip or warm up each model and measure
    its memory; (2) time every (model, size) left in rounds, all of them once per
    round in a rotating order, so that a change of load shifts every figure alike
    (ratios between models and growth between sizes included). ``probe``: first a warm-up,
    a timed step and a memory measurement per model at half each side of the smallest
    size, not reported, so that the smallest size is predicted (and skipped if too
    costly) too."""
    timer = Timer(device)
    max_mem_gb = args.max_mem_gb or default_max_mem_gb(device)
    results: List[Result] = []
    inputs = {size: torch.randn(args.batch, 3, *size, device=device) for size in args.sizes}
    for mode in args.modes:
        for model in models.values():
            model.train(mode == 'training')
        plan = []
        history: Dict[str, Dict[str, List[Tuple[int, float]]]] = {}
        if probe:
            h, w = (max(32, side // 2) for side in args.sizes[0])
            x = torch.randn(args.batch, 3, h, w, device=device)
            for name in args.models:
                step = make_step(models[name], x, mode)
                step()                  # (a model's first run pays one-time set-up costs)
                history[name] = {'time': [(h * w, timer(step))],
                                 'mem': [(h * w, timer.peak_bytes(step))]}
            del x
        for size in args.sizes:
            for name in args.models:
                res = Result(device.type, name, mode, size)
                results.append(res)
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
                    free_memory(device)
                    continue
                hist['time'].append((res.pixels, min(probe)))
                hist['mem'].append((res.pixels, res.peak_bytes))
                print(f'  {name:14s} {mode:9s} {_size(size):>9s}'
                      f'  warm-up {min(probe) * 1e3:9.1f} ms'
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
        free_memory(device)
    return results


def _size(size):
    return f'{size[0]}x{size[1]}'


def _report_line(res: Result):
    print(f'  {res.model:14s} {res.mode:9s} {_size(res.size):>9s}'
          f'  median {res.median * 1e3:9.1f} ms'
          f'  (min {min(res.times) * 1e3:.1f}, max {max(res.times) * 1e3:.1f}, '
          f'n={len(res.times)})  peak {res.peak_bytes / 2 ** 20:8.1f} MiB', flush=True)


def sizes_of(results: Sequence[Result]) -> List[Tuple[int, int]]:
    """The sizes the results hold, smallest first."""
    return sorted({r.size for r in results}, key=lambda s: s[0] * s[1])


def mode_sections(results: Sequence[Result], dev: str):
    """(mode, heading) for each mode the results hold on the device: one table each."""
    for mode in MODES:
        if any(r.device == dev and r.mode == mode for r in results):
            what = 'forward, no_grad' if mode == 'inference' else 'forward + backward'
            yield mode, f'\n{dev.upper()} {mode} ({what}): median ms [peak MiB]'


def backbone_tables(results: List[Result], models: Sequence[str]) -> str:
    lines = []
    by_key = {(r.device, r.model, r.mode, r.size): r for r in results}
    devices = sorted({r.device for r in results})
    sizes = sizes_of(results)
    for dev in devices:
        for mode, heading in mode_sections(results, dev):
            lines.append(heading)
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
    return '\n'.join(lines)


#: The CSV columns of one timing (:func:`timing_cells`), after batch and threads.
TIMING_COLUMNS = ['median_ms', 'min_ms', 'max_ms', 'runs', 'peak_mib']


def timing_cells(r: Result) -> list:
    """Median, min and max ms, runs and peak MiB of a result ('' where it was skipped)."""
    ok = r.median is not None
    return [f'{r.median * 1e3:.3f}' if ok else '',
            f'{min(r.times) * 1e3:.3f}' if ok else '',
            f'{max(r.times) * 1e3:.3f}' if ok else '', len(r.times),
            f'{r.peak_bytes / 2 ** 20:.2f}' if r.peak_bytes is not None else '']


def write_backbone_csv(results: List[Result], path: Path, batch: int,
                       mem_methods: Dict[str, str]):
    with open(path, 'w', newline='') as f:
        w = csv.writer(f)
        w.writerow(['device', 'model', 'attention', 'mode', 'height', 'width', 'megapixels',
                    'batch', 'threads', *TIMING_COLUMNS, 'memory_method', 'status'])
        for r in results:
            w.writerow([r.device, r.model, MODELS[r.model][1], r.mode, r.size[0], r.size[1],
                        f'{r.pixels / 1e6:.4f}', batch, torch.get_num_threads(),
                        *timing_cells(r), mem_methods[r.device], r.status])


#: Colour, marker and line style of each model in the plots.
STYLES = {'InLine-Swin-T': ('tab:blue', 'o', '-'), 'Swin-T': ('tab:orange', 's', '--'),
          'Swin-T-global': ('tab:red', '^', ':'), 'InLine-PVT-S': ('tab:green', 'o', '-'),
          'PVT-S': ('tab:purple', 's', '--')}


def plot_backbones(results: List[Result], path: Path, title: str):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    devices = sorted({r.device for r in results})
    fig, axes = plt.subplots(len(devices), len(MODES), figsize=(12, 4.8 * len(devices)),
                             squeeze=False)
    for i, dev in enumerate(devices):
        for j, mode in enumerate(MODES):
            ax = axes[i][j]
            for name in MODELS:
                pts = sorted((r.pixels / 1e6, r.median * 1e3) for r in results
                             if r.device == dev and r.mode == mode and r.model == name
                             and r.median is not None)
                if pts:
                    color, marker, ls = STYLES[name]
                    ax.plot(*zip(*pts), marker=marker, linestyle=ls, color=color, label=name)
            inline = sorted((r.pixels / 1e6, r.median * 1e3) for r in results
                            if r.device == dev and r.mode == mode and r.median is not None
                            and r.model == 'InLine-Swin-T')
            if len(inline) > 1:
                (p0, t0), p1 = inline[0], inline[-1][0]
                ax.plot([p0, p1], [t0, t0 * p1 / p0], color='0.6', linewidth=0.8,
                        label='linear in pixels (from InLine-Swin-T)')
            log_log_axes(ax, 'input megapixels', 'median time per image (ms)',
                         f'{dev.upper()} {mode}')
    save_figure(fig, path, title)


def log_log_axes(ax, xlabel: str, ylabel: str, title: str):
    """A panel's log-log scales, labels, grid and legend (set its ticks after this)."""
    ax.set_xscale('log')
    ax.set_yscale('log')
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which='both', alpha=0.3)
    ax.legend(fontsize=8)


def save_figure(fig, path: Path, title: str, dpi: int = 110):
    import matplotlib.pyplot as plt
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
