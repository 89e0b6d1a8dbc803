#!/usr/bin/env python
"""InLine-DeiT-T against DeiT-T at high resolution: the paper's speed claim, measured.

    python tools/benchmark_deit.py                 # 224 384 640 1024 1536, CPU (+ CUDA if present)
    python tools/benchmark_deit.py --quick         # CI-sized run (seconds)
    python tools/benchmark_deit.py --ratio-only    # only the attention / linear-layer split at 1024

The InLine paper (Han et al., NeurIPS 2024, arXiv 2412.06590, Fig. 3c, on a GPU) reports
InLine-DeiT-T about as fast as DeiT-T at 224, 2.4x faster at 640 and 4.8x at 1024:
Softmax attention over all tokens is quadratic in the number of tokens, InLine is linear.

Backbones, compared in one process (random weights, stochastic depth off, batch 1, the
outputs of blocks 3, 6, 9, 12 as in the UperNet configs):

  InLine-DeiT-T   inline_mm InLineDeiT(arch='tiny'): 192 wide, 12 blocks, 6 heads
  DeiT-T          mmseg VisionTransformer with the same width, depth and heads. Its
                  attention is mmcv's MultiheadAttention, i.e. torch.nn.MultiheadAttention
                  with need_weights=True: the attention matrix is formed explicitly (what
                  an mmseg user runs)
  DeiT-T-sdpa     the same DeiT-T with need_weights=False, so torch runs its fused
                  scaled_dot_product_attention kernel (the fastest Softmax baseline)

Timing and memory follow tools/benchmark.py (whose measuring code this reuses): per mode
(inference = no_grad forward; training = forward + backward) every model is warmed up and
its peak memory measured at each size in increasing order, then all (model, size) pairs
are timed in ``--repeats`` interleaved rounds and the median is reported. A size whose run
is predicted, from the growth at the smaller sizes, to take longer than ``--max-run-s``
or more than ``--max-mem-gb`` is skipped and the table says so.

The split: at 1024x1024 (64x64 patches + class token = 4097 tokens) one InLine-DeiT-T
block is timed in parts: the attention proper (everything between the qkv and output
projections: the token mean, the kernel prediction, the linear attention and the local
3x3 term) against the block's linear layers (qkv, proj and the MLP), forward and
forward + backward, interleaved, medians. The goal is attention / linear < 0.3. The
Softmax attention proper of the same shapes (fused SDPA) is timed beside it for scale.

Outputs in ``--out-dir`` (default work_dirs/benchmark_deit): ``deit.csv``, ``deit.png``
(time against pixels and the speed-up curve with the paper's points), ``deit_split.csv``,
``meta.json``; the tables on stdout.
"""
import argparse
import csv
import functools
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Dict, List

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchmark as bench  # noqa: E402  (tools/benchmark.py: the shared measuring code)

ROOT = Path(__file__).resolve().parents[1]
FULL_SIZES = [(224, 224), (384, 384), (640, 640), (1024, 1024), (1536, 1536)]
QUICK_SIZES = [(64, 64), (96, 128)]
INLINE = 'InLine-DeiT-T'
BASELINES = ('DeiT-T', 'DeiT-T-sdpa')
#: Speed-up of InLine-DeiT-T over DeiT-T read in the paper (Fig. 3c, GPU, inference).
PAPER_SPEEDUP = {224: 1.0, 640: 2.4, 1024: 4.8}
SPLIT_SIZE, SPLIT_GOAL = (1024, 1024), 0.3
OUT_INDICES = (2, 5, 8, 11)


def build_inline_deit_t():
    from inline_mm.models.backbones import InLineDeiT
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

def ratio_table(results: List['bench.Result'], models) -> str:
    by_key = {(r.device, r.model, r.mode, r.size): r for r in results}
    sizes = sorted({r.size for r in results}, key=lambda s: s[0] * s[1])
    lines = []
    for dev in sorted({r.device for r in results}):
        for mode in bench.MODES:
            if not any(r.device == dev and r.mode == mode for r in results):
                continue
            what = 'forward, no_grad' if mode == 'inference' else 'forward + backward'
            lines.append(f'\n{dev.upper()} {mode} ({what}): median ms [peak MiB]')
            lines.append(f'{"size":>10s}{"tokens":>8s}' + ''.join(f'{m:>20s}' for m in models))
            for size in sizes:
                tokens = 1 + -(-size[0] // 16) * -(-size[1] // 16)
                row = f'{bench._size(size):>10s}{tokens:>8d}'
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
                row = f'{bench._size(size):>10s}'
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
            lines.append(f'  {r.model} {r.mode} {bench._size(r.size)}: {r.status}')
    return '\n'.join(lines)


def write_csv(results, path: Path, args, mem_methods: Dict[str, str]):
    with open(path, 'w', newline='') as f:
        w = csv.writer(f)
        w.writerow(['device', 'model', 'attention', 'mode', 'height', 'width', 'tokens',
                    'batch', 'threads', 'median_ms', 'min_ms', 'max_ms', 'runs', 'peak_mib',
                    'speedup_vs_inline', 'memory_method', 'status'])
        inline = {(r.device, r.mode, r.size): r for r in results if r.model == INLINE}
        for r in results:
            ok = r.median is not None
            ri = inline.get((r.device, r.mode, r.size))
            speed = (f'{r.median / ri.median:.3f}' if ok and ri is not None and ri.median
                     else '')
            w.writerow([r.device, r.model, MODELS[r.model][1], r.mode, r.size[0], r.size[1],
                        1 + -(-r.size[0] // 16) * -(-r.size[1] // 16), args.batch,
                        torch.get_num_threads(),
                        f'{r.median * 1e3:.3f}' if ok else '',
                        f'{min(r.times) * 1e3:.3f}' if ok else '',
                        f'{max(r.times) * 1e3:.3f}' if ok else '', len(r.times),
                        f'{r.peak_bytes / 2 ** 20:.2f}' if r.peak_bytes is not None else '',
                        speed, mem_methods[r.device], r.status])


def plot(results, path: Path, title: str):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    devices = sorted({r.device for r in results})
    fig, axes = plt.subplots(len(devices), 3, figsize=(16, 4.6 * len(devices)), squeeze=False)
    styles = {INLINE: ('tab:blue', 'o', '-'), 'DeiT-T': ('tab:orange', 's', '--'),
              'DeiT-T-sdpa': ('tab:red', '^', ':')}
    for i, dev in enumerate(devices):
        for j, mode in enumerate(bench.MODES):
            ax = axes[i][j]
            for name in MODELS:
                pts = sorted((r.pixels / 1e6, r.median * 1e3) for r in results
                             if (r.device, r.mode, r.model) == (dev, mode, name) and r.median)
                if pts:
                    color, marker, ls = styles[name]
                    ax.plot(*zip(*pts), marker=marker, linestyle=ls, color=color, label=name)
            ax.set_xscale('log')
            ax.set_yscale('log')
            ax.set_xlabel('input megapixels')
            ax.set_ylabel('median time per image (ms)')
            ax.set_title(f'{dev.upper()} {mode}')
            ax.grid(True, which='both', alpha=0.3)
            ax.legend(fontsize=8)
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
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------- split

def run_split(args, device: torch.device) -> List[dict]:
    """Attention proper vs linear layers of one InLine-DeiT-T block at ``args.split_size``."""
    timer = bench.Timer(device)
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
        times = {name: [] for name in parts}
        for step in steps.values():
            for _ in range(max(args.warmup, 1)):
                timer(step)
        names = list(parts)
        for rep in range(args.split_repeats):
            order = names[rep % len(names):] + names[:rep % len(names)]
            for name in order:
                times[name].append(timer(steps[name]))
        for name in names:
            rows.append(dict(device=device.type, mode=mode, part=name, tokens=n, channels=c,
                             heads=attn.num_heads, batch=args.batch,
                             threads=torch.get_num_threads(),
                             median_ms=statistics.median(times[name]) * 1e3,
                             min_ms=min(times[name]) * 1e3, max_ms=max(times[name]) * 1e3,
                             runs=len(times[name])))
    return rows


def split_table(rows: List[dict], quick: bool) -> str:
    lines = []
    for dev in sorted({r['device'] for r in rows}):
        for mode in bench.MODES:
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


# ----------------------------------------------------------------------------- driver

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog='See the module docstring for what is measured and how.')
    p.add_argument('--quick', action='store_true',
                   help='CI-sized run: 64x64 and 96x128, the split on 96x96, 2 repeats')
    p.add_argument('--ratio-only', action='store_true',
                   help='only the attention / linear-layer split')
    p.add_argument('--sizes', nargs='+', type=bench.parse_size, default=None,
                   help='input sizes, N or HxW (default: 224 384 640 1024 1536)')
    p.add_argument('--models', nargs='+', choices=list(MODELS), default=list(MODELS))
    p.add_argument('--modes', nargs='+', choices=bench.MODES, default=list(bench.MODES))
    p.add_argument('--device', choices=['auto', 'cpu', 'cuda', 'all'], default='auto',
                   help='auto: CUDA when present, else CPU; all: CPU and CUDA')
    p.add_argument('--batch', type=int, default=1)
    p.add_argument('--repeats', type=int, default=None,
                   help='timed runs per model and size (default 5; --quick 2)')
    p.add_argument('--split-repeats', type=int, default=None,
                   help='timed runs per part of the split (default 15; --quick 2)')
    p.add_argument('--warmup', type=int, default=1)
    p.add_argument('--threads', type=int, default=None)
    p.add_argument('--max-run-s', type=float, default=None,
                   help='skip a size whose predicted single run takes longer (default 60; '
                        '--quick 20)')
    p.add_argument('--max-mem-gb', type=float, default=None,
                   help='skip a size whose predicted peak memory is larger (default: half '
                        'of the available memory)')
    p.add_argument('--out-dir', type=Path, default=ROOT / 'work_dirs' / 'benchmark_deit')
    args = p.parse_args(argv)
    if args.batch < 1 or args.warmup < 0:
        p.error('--batch must be >= 1 and --warmup >= 0')
    if args.sizes is None:
        args.sizes = QUICK_SIZES if args.quick else FULL_SIZES
    args.sizes = sorted(args.sizes, key=lambda s: s[0] * s[1])
    args.repeats = args.repeats or (2 if args.quick else 5)
    args.split_repeats = args.split_repeats or (2 if args.quick else 15)
    args.max_run_s = args.max_run_s or (20. if args.quick else 60.)
    args.split_size = (96, 96) if args.quick else SPLIT_SIZE
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    import inline_mm  # noqa: F401
    args.out_dir.mkdir(parents=True, exist_ok=True)
    info = bench.machine_info()
    devices = bench.devices_for(args.device)
    print(f'machine: {info["cpu"]}, {info["logical_cores"]} logical cores, torch '
          f'{info["torch"]} with {info["torch_threads"]} thread(s)'
          + (f', GPU {info["cuda"]}' if info['cuda'] else '')
          + (f'; load average {info["load_average_start"][0]:.2f}'
             if 'load_average_start' in info else ''))
    print('timings are medians of interleaved runs; other processes on a shared machine '
          'still add noise')
    outputs = []
    if not args.ratio_only:
        results, mem_methods = [], {}
        for device in devices:
            models = {name: MODELS[name][0]().to(device) for name in args.models}
            print(f'\n{device.type.upper()}: sizes {", ".join(bench._size(s) for s in args.sizes)}'
                  f'; {args.warmup} warm-up + {args.repeats} timed runs each, batch {args.batch}')
            results += bench.run_backbones(args, device, models, {})
            mem_methods[device.type] = bench.Timer(device).mem_method
            del models
            bench._free(device)
        print(ratio_table(results, args.models))
        csv_path = args.out_dir / 'deit.csv'
        write_csv(results, csv_path, args, mem_methods)
        png_path = args.out_dir / 'deit.png'
        plot(results, png_path, f'{info["cpu"]}, torch {info["torch"]}, '
             f'{torch.get_num_threads()} thread(s), batch {args.batch}'
             + (f', GPU {info["cuda"]}' if info['cuda'] else ''))
        outputs += [csv_path, png_path]
    rows = []
    for device in devices:
        rows += run_split(args, device)
    print(split_table(rows, args.quick))
    split_path = args.out_dir / 'deit_split.csv'
    with open(split_path, 'w', newline='') as f:
        wr = csv.DictWriter(f, fieldnames=list(rows[0]))
        wr.writeheader()
        for r in rows:
            wr.writerow({k: (f'{v:.3f}' if isinstance(v, float) else v) for k, v in r.items()})
    outputs.append(split_path)
    if hasattr(os, 'getloadavg'):
        info['load_average_end'] = os.getloadavg()
    info['arguments'] = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    meta = args.out_dir / 'meta.json'
    meta.write_text(json.dumps(info, indent=2, default=str))
    outputs.append(meta)
    print('\nwrote ' + ', '.join(str(p) for p in outputs))


if __name__ == '__main__':
    main()
