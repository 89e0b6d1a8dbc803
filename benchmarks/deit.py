"""InLine-DeiT-T against DeiT-T at high resolution (``python -m benchmarks --deit``).

The InLine paper (Han et al., NeurIPS 2024, arXiv 2412.06590, Fig. 3c, GPU) reports
InLine-DeiT-T about as fast as DeiT-T at 224, 2.4x faster at 640 and 4.8x at 1024:
Softmax attention over all tokens is quadratic in the number of tokens, InLine linear.

Backbones (random weights, stochastic depth off, the outputs of blocks 3, 6, 9, 12):

  InLine-DeiT-T   InLineDeiT(arch='tiny'): 192 wide, 12 blocks, 6 heads
  DeiT-T          mmseg VisionTransformer with the same width, depth and heads; its
                  attention is mmcv's MultiheadAttention (torch.nn.MultiheadAttention with
                  need_weights=True, so the attention matrix is formed: what mmseg runs)
  DeiT-T-sdpa     the same with need_weights=False: torch's fused
                  scaled_dot_product_attention (the fastest Softmax baseline)

They are timed by :func:`.backbones.run_backbones` (interleaved rounds, medians, peak
memory, predicted skips). The split (:func:`run_split`): at 1024x1024 (4097 tokens) one
InLine-DeiT-T block's attention proper (everything between the qkv and output
projections) against its linear layers (qkv, proj, MLP), forward and forward +
backward; the goal is a ratio below 0.3. The fused Softmax attention proper of the
same shapes is timed beside it for scale.
"""
import csv
import functools
from pathlib import Path
from typing import Dict, List

import torch
import torch.nn as nn
import torch.nn.functional as F

from .backbones import (MODES, TIMING_COLUMNS, Result, _size, log_log_axes, mode_sections,
                        save_figure, sizes_of, timing_cells)
from .measure import Timer, interleaved_times, time_stats

__all__ = ['MODELS', 'FULL_SIZES', 'QUICK_SIZES', 'PAPER_SPEEDUP', 'SPLIT_SIZE', 'SPLIT_GOAL',
           'ratio_table', 'write_csv', 'plot', 'run_split', 'split_table']

FULL_SIZES = [(224, 224), (384, 384), (640, 640), (1024, 1024), (1536, 1536)]
QUICK_SIZES = [(64, 64), (96, 128)]
INLINE = 'InLine-DeiT-T'
BASELINES = ('DeiT-T', 'DeiT-T-sdpa')
#: Speed-up of InLine-DeiT-T over DeiT-T read in the paper (Fig. 3c, GPU, inference).
PAPER_SPEEDUP = {224: 1.0, 640: 2.4, 1024: 4.8}
SPLIT_SIZE, SPLIT_GOAL = (1024, 1024), 0.3
OUT_INDICES = (2, 5, 8, 11)


def build_inline_deit_t():
    from inline_mm.models.inline_deit import InLineDeiT
    return InLineDeiT(arch='tiny', drop_path_rate=0., out_indices=OUT_INDICES)


def build_deit_t(fused: bool = False):
    from mmseg.models.backbones import VisionTransformer
    model = VisionTransformer(img_size=224, patch_size=16, embed_dims=192, num_layers=12,
                              num_heads=6, mlp_ratio=4, out_indices=OUT_INDICES, qkv_bias=True,
                              drop_path_rate=0., with_cls_token=True, final_norm=True,
                              norm_cfg=dict(type='LN', eps=1e-6), interpolate_mode='bicubic')
    if fused:
        for m in model.modules():
            if isinstance(m, nn.MultiheadAttention):
                # Without the weights torch takes its fused scaled_dot_product_attention.
                m.forward = functools.partial(m.forward, need_weights=False)
    return model


MODELS = {
    INLINE: (build_inline_deit_t, 'InLine, global, linear'),
    'DeiT-T': (build_deit_t, 'Softmax, global (mmseg ViT, explicit attention matrix)'),
    'DeiT-T-sdpa': (functools.partial(build_deit_t, fused=True),
                    'Softmax, global (mmseg ViT, fused SDPA)'),
}


# ------------------------------------------------------------------------ ratio table

def ratio_table(results: List[Result], models) -> str:
    by_key = {(r.device, r.model, r.mode, r.size): r for r in results}
    sizes = sizes_of(results)
    lines = []
    for dev in sorted({r.device for r in results}):
        for mode, heading in mode_sections(results, dev):
            lines.append(heading)
            lines.append(f'{"size":>10s}{"tokens":>8s}' + ''.join(f'{m:>20s}' for m in models))
            for size in sizes:
                tokens = 1 + -(-size[0] // 16) * -(-size[1] // 16)
                row = f'{_size(size):>10s}{tokens:>8d}'
                for m in models:
                    r = by_key.get((dev, m, mode, size))
                    if r is None:
                        cell = '-'
                    elif r.median is None:
                        cell = r.status.split(':')[0]
                    else:
                        cell = f'{r.median * 1e3:.0f} [{r.peak_bytes / 2 ** 20:.0f}]'
                    row += f'{cell:>20s}'
                lines.append(row)
            base = [b for b in BASELINES if b in models]
            if INLINE not in models or not base:
                continue
            lines.append(f'{"":>10s}  speed-up = baseline time / {INLINE} time '
                         '(memory ratio in brackets; > 1: InLine faster / smaller)')
            head = ''.join(f'{b + " / InLine":>24s}' for b in base)
            paper = mode == 'inference' and dev == 'cuda'
            lines.append(f'{"size":>10s}' + head + (f'{"paper (GPU)":>14s}' if mode ==
                                                    'inference' else ''))
            for size in sizes:
                row = f'{_size(size):>10s}'
                ri = by_key.get((dev, INLINE, mode, size))
                for b in base:
                    rb = by_key.get((dev, b, mode, size))
                    if ri and rb and ri.median and rb.median:
                        cell = (f'{rb.median / ri.median:.2f}x '
                                f'[{rb.peak_bytes / max(ri.peak_bytes, 1):.1f}x]')
                    elif rb is not None and rb.median is None:
                        cell = rb.status.split(':')[0]
                    else:
                        cell = '-'
                    row += f'{cell:>24s}'
                if mode == 'inference':
                    p = PAPER_SPEEDUP.get(size[0]) if size[0] == size[1] else None
                    row += f'{(f"{p:.1f}x" if p else ""):>14s}'
                lines.append(row)
            if not paper and mode == 'inference':
                lines.append(f'{"":>10s}  (the paper\'s figures are GPU inference; these are '
                             f'{dev.upper()})')
        skipped = [r for r in results if r.device == dev and r.status.startswith('skipped')]
        for r in skipped:
            lines.append(f'  {r.model} {r.mode} {_size(r.size)}: {r.status}')
    return '\n'.join(lines)


def write_csv(results, path: Path, args, mem_methods: Dict[str, str]):
    with open(path, 'w', newline='') as f:
        w = csv.writer(f)
        w.writerow(['device', 'model', 'attention', 'mode', 'height', 'width', 'tokens',
                    'batch', 'threads', *TIMING_COLUMNS, 'speedup_vs_inline', 'memory_method',
                    'status'])
        inline = {(r.device, r.mode, r.size): r for r in results if r.model == INLINE}
        for r in results:
            ok = r.median is not None
            ri = inline.get((r.device, r.mode, r.size))
            speed = (f'{r.median / ri.median:.3f}' if ok and ri is not None and ri.median
                     else '')
            w.writerow([r.device, r.model, MODELS[r.model][1], r.mode, r.size[0], r.size[1],
                        1 + -(-r.size[0] // 16) * -(-r.size[1] // 16), args.batch,
                        torch.get_num_threads(), *timing_cells(r), speed,
                        mem_methods[r.device], r.status])


def plot(results, path: Path, title: str):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    devices = sorted({r.device for r in results})
    fig, axes = plt.subplots(len(devices), 3, figsize=(16, 4.6 * len(devices)), squeeze=False)
    styles = {INLINE: ('tab:blue', 'o', '-'), 'DeiT-T': ('tab:orange', 's', '--'),
              'DeiT-T-sdpa': ('tab:red', '^', ':')}
    for i, dev in enumerate(devices):
        for j, mode in enumerate(MODES):
            ax = axes[i][j]
            for name in MODELS:
                pts = sorted((r.pixels / 1e6, r.median * 1e3) for r in results
                             if (r.device, r.mode, r.model) == (dev, mode, name) and r.median)
                if pts:
                    color, marker, ls = styles[name]
                    ax.plot(*zip(*pts), marker=marker, linestyle=ls, color=color, label=name)
            log_log_axes(ax, 'input megapixels', 'median time per image (ms)',
                         f'{dev.upper()} {mode}')
        ax = axes[i][2]
        inline = {(r.mode, r.size): r for r in results
                  if r.device == dev and r.model == INLINE and r.median}
        for name in BASELINES:
            for mode, marker in (('inference', 'o'), ('training', 's')):
                pts = sorted((r.size[0], r.median / inline[(mode, r.size)].median)
                             for r in results
                             if (r.device, r.mode, r.model) == (dev, mode, name) and r.median
                             and (mode, r.size) in inline and r.size[0] == r.size[1])
                if pts:
                    ax.plot(*zip(*pts), marker=marker, color=styles[name][0],
                            linestyle='-' if mode == 'inference' else '--',
                            label=f'{name} / InLine, {mode}')
        ax.plot(list(PAPER_SPEEDUP), list(PAPER_SPEEDUP.values()), 'k*', markersize=10,
                label='paper Fig. 3c (GPU, inference)')
        ax.axhline(1.0, color='0.6', linewidth=0.8)
        ax.set_xlabel('image side (pixels, square)')
        ax.set_ylabel('speed-up of InLine-DeiT-T')
        ax.set_title(f'{dev.upper()} speed-up over DeiT-T')
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    save_figure(fig, path, title)


# ----------------------------------------------------------------------------- split

def run_split(args, device: torch.device) -> List[dict]:
    """Attention proper vs linear layers of one InLine-DeiT-T block at ``args.split_size``."""
    timer = Timer(device)
    torch.manual_seed(0)
    block = build_inline_deit_t().blocks[0].to(device)
    attn = block.attn
    h, w = -(-args.split_size[0] // 16), -(-args.split_size[1] // 16)
    n, c = 1 + h * w, attn.dim
    x = block.norm1(torch.randn(args.batch, n, c, device=device)).detach()
    qkv = attn.qkv(x).detach()
    y = torch.randn(args.batch, n, c, device=device)

    def inline_attention_proper(xx, qq):
        return attn.attend(qq, (h, w), xx.mean(dim=1))

    def softmax_attention_proper(xx, qq):
        q, k, v = qq.view(args.batch, n, 3, attn.num_heads, -1).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(args.batch, n, c)

    def linear_layers(xx, qq):
        return attn.qkv(xx).sum() + attn.proj(xx).sum() + block.mlp(xx).sum()

    parts = {'InLine attention proper': inline_attention_proper,
             'linear layers (qkv, proj, MLP)': linear_layers,
             'Softmax attention proper (SDPA)': softmax_attention_proper}

    def step_for(fn, mode):
        if mode == 'inference':
            def step():
                with torch.no_grad():
                    fn(x, qkv)
        else:
            def step():
                xx, qq = x.detach().requires_grad_(), qkv.detach().requires_grad_()
                out = fn(xx, qq)
                (out if out.dim() == 0 else (out * y).sum()).backward()
                block.zero_grad(set_to_none=True)
        return step

    rows = []
    for mode in args.modes:
        steps = {name: step_for(fn, mode) for name, fn in parts.items()}
        times = interleaved_times(timer, steps, max(args.warmup, 1), args.split_repeats)
        for name in parts:
            rows.append(dict(device=device.type, mode=mode, part=name, tokens=n, channels=c,
                             heads=attn.num_heads, batch=args.batch,
                             threads=torch.get_num_threads(), **time_stats(times[name])))
    return rows


def split_table(rows: List[dict], quick: bool) -> str:
    lines = []
    for dev in sorted({r['device'] for r in rows}):
        for mode in MODES:
            sel = {r['part']: r for r in rows if r['device'] == dev and r['mode'] == mode}
            if not sel:
                continue
            any_row = next(iter(sel.values()))
            what = 'forward' if mode == 'inference' else 'forward + backward'
            lines.append(f'\n{dev.upper()} one InLine-DeiT-T block, {any_row["tokens"]} tokens, '
                         f'{what}: median ms (min-max)')
            for name, r in sel.items():
                lines.append(f'  {name:34s} {r["median_ms"]:8.2f} ({r["min_ms"]:.2f}-'
                             f'{r["max_ms"]:.2f}, n={r["runs"]})')
            lin = sel['linear layers (qkv, proj, MLP)']['median_ms']
            ratio = sel['InLine attention proper']['median_ms'] / lin
            soft = sel['Softmax attention proper (SDPA)']['median_ms'] / lin
            verdict = '' if quick else (f' (goal < {SPLIT_GOAL}: '
                                        f'{"met" if ratio < SPLIT_GOAL else "NOT met"})')
            lines.append(f'  InLine attention / linear layers = {ratio:.3f}{verdict}; '
                         f'Softmax (SDPA) attention / linear layers = {soft:.2f}')
    return '\n'.join(lines)
