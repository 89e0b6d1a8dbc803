"""InLine against Softmax in every precision (``python -m benchmarks.precision``).

Pairs of backbones of about the same size (random weights, stochastic depth off, batch 1):

  InLine-Swin-T   InLineSwin(arch='tiny')        Swin-T: mmdet SwinTransformer (Swin-T);
                                                 Swin-T-softmax: InLine-Swin-T, every stage
                                                 Softmax (stage_types)
  InLine-PVT-S    InLinePVT(arch='small')        PVT-S: mmdet PyramidVisionTransformer
                                                 (num_layers=[3, 4, 6, 3]); PVT-S-softmax
  InLine-DeiT-B   InLineDeiT(arch='base'),       DeiT-S: mmseg VisionTransformer (384 wide,
                  384 wide, 12 blocks            12 blocks, 6 heads); no stage_types
  InLine-CSwin-T  InLineCSwin(arch='tiny')       no OpenMMLab CSwin; CSwin-T-softmax

Precisions: ``fp32``; ``bf16-autocast`` (``torch.autocast('cpu', torch.bfloat16)``, fp32
weights); ``bf16`` (pure: ``model.to(torch.bfloat16)`` and a bf16 input; a model that fails
so is reported as failing). Modes: ``forward`` (eval, ``no_grad``) and ``training``
(train mode, forward and backward of the outputs' mean squares).

Every model is built first; then every (model, precision, mode) runs once per round, in
rounds that start one step further on each time (``--rounds``), so that load from other
processes falls on all alike; medians and the per-round ratios are reported. Columns:

* GMACs of one forward (:func:`inline_mm.analysis.complexity.count_macs`: the formula's
  products for InLine, torch's ``FlopCounterMode`` for all);
* seconds (median; the process's CPU time with one thread, ``--clock``);
* share of peak (forward): ``2 MACs / time`` against the best square matmul (2048, 3072)
  of the precision's product dtype measured in the same run (fp32, or bf16);
* the ratio to each counterpart (its time / InLine's, median of the per-round ratios:
  above 1 means InLine is faster);
* conversions: the share of the forward's self CPU time (``torch.profiler``, eager) in
  ``aten::_to_copy``, ``aten::copy_``, ``aten::contiguous`` and ``aten::clone``.

Whether the CPU computes bf16 in hardware is :func:`inline_mm.env.bf16_support`; without
bf16 units PyTorch emulates it (slower than fp32), and the run says so. Then the fake-CUDA
section: the ops one forward dispatches per block and the dtype conversions among them
under CUDA fp16 and bf16 autocast (:func:`benchmarks.launches.autocast_counts`), which need
no GPU.

Default: 800x1280, one thread, forward and training, 3 rounds (minutes). ``--full``: also
512x512 and 1024x2048, and all threads. ``--quick``: the CI smoke run (64x96, one round,
seconds). Outputs in ``--out-dir``: ``precision.csv``, ``precision_launches.csv``,
``meta.json``.
"""
import argparse
import copy
import json
import os
import statistics
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from benchmarks import launches
from benchmarks.measure import machine_info, write_dict_rows
from inline_mm.env import bf16_support
from inline_mm.models import InLineCSwin, InLineDeiT, InLinePVT, InLineSwin

ROOT = Path(__file__).resolve().parents[1]
SIZE, QUICK_SIZE = (800, 1280), (64, 96)
FULL_SIZES = [(512, 512), (800, 1280), (1024, 2048)]
PRECISIONS = ('fp32', 'bf16-autocast', 'bf16')
MODES = ('forward', 'training')
#: the ops whose self CPU time is the conversions' and copies' share
CONVERSION_OPS = ('aten::_to_copy', 'aten::copy_', 'aten::contiguous', 'aten::clone')
DEIT_OUT = (2, 5, 8, 11)


#: --quick: every model shrunk to a few narrow blocks (the same code paths, seconds)
QUICK = {
    'swin': dict(embed_dims=16, depths=(1, 1, 1, 1), num_heads=(1, 2, 4, 8)),
    'pvt': dict(embed_dims=(16, 32, 48, 64), depths=(1, 1, 1, 1), num_heads=(1, 2, 3, 4)),
    'deit': dict(embed_dims=32, depth=2, num_heads=2, out_indices=(0, 1)),
    'cswin': dict(embed_dims=16, depths=(1, 1, 1, 1), num_heads=(2, 2, 4, 8)),
}


def _family(cls, arch: str, key: str, softmax: bool = False, **fixed):
    def build(quick: bool) -> nn.Module:
        kwargs = dict(fixed, arch=arch, drop_path_rate=0., **(QUICK[key] if quick else {}))
        if softmax:
            kwargs['stage_types'] = ('softmax',) * 4
        return cls(**kwargs)
    return build


def _mmdet_swin_t(quick: bool) -> nn.Module:
    from mmdet.models.backbones import SwinTransformer
    if quick:
        return SwinTransformer(drop_path_rate=0., **QUICK['swin'])
    return SwinTransformer(embed_dims=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24),
                           window_size=7, drop_path_rate=0.)


def _mmdet_pvt_s(quick: bool) -> nn.Module:
    from mmdet.models.backbones import PyramidVisionTransformer
    if quick:
        return PyramidVisionTransformer(embed_dims=16, num_layers=[1, 1, 1, 1],
                                        num_heads=[1, 2, 3, 4], drop_path_rate=0.)
    return PyramidVisionTransformer(num_layers=[3, 4, 6, 3], drop_path_rate=0.)


def _mmseg_deit_s(quick: bool) -> nn.Module:
    from mmseg.models.backbones import VisionTransformer
    size = dict(embed_dims=32, num_layers=2, num_heads=2, out_indices=(0, 1)) if quick else \
        dict(embed_dims=384, num_layers=12, num_heads=6, out_indices=DEIT_OUT)
    return VisionTransformer(img_size=224, patch_size=16, mlp_ratio=4, qkv_bias=True,
                             drop_path_rate=0., with_cls_token=True, final_norm=True,
                             norm_cfg=dict(type='LN', eps=1e-6), interpolate_mode='bicubic',
                             **size)


#: InLine model -> (its builder, [(counterpart, builder, what it is)]); a builder takes
#: ``quick``
PAIRS: Dict[str, Tuple[Callable[[bool], nn.Module], List[Tuple[str, Callable, str]]]] = {
    'InLine-Swin-T': (_family(InLineSwin, 'tiny', 'swin'), [
        ('Swin-T', _mmdet_swin_t, 'mmdet SwinTransformer'),
        ('Swin-T-softmax', _family(InLineSwin, 'tiny', 'swin', True), 'every stage Softmax')]),
    'InLine-PVT-S': (_family(InLinePVT, 'small', 'pvt'), [
        ('PVT-S', _mmdet_pvt_s, 'mmdet PyramidVisionTransformer'),
        ('PVT-S-softmax', _family(InLinePVT, 'small', 'pvt', True), 'every stage Softmax')]),
    'InLine-DeiT-B': (_family(InLineDeiT, 'base', 'deit', out_indices=DEIT_OUT),
                      [('DeiT-S', _mmseg_deit_s, 'mmseg VisionTransformer')]),
    'InLine-CSwin-T': (_family(InLineCSwin, 'tiny', 'cswin'), [
        ('CSwin-T-softmax', _family(InLineCSwin, 'tiny', 'cswin', True),
         'every stage Softmax')]),
}
#: what the run says of a family without an OpenMMLab counterpart
NO_COUNTERPART = {'InLine-CSwin-T': 'no CSwin in mmdet or mmseg'}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--quick', action='store_true', help='CI smoke run (64x96, 1 round)')
    p.add_argument('--full', action='store_true',
                   help='512x512, 800x1280 and 1024x2048, one thread and all threads')
    p.add_argument('--pairs', nargs='+', choices=list(PAIRS), default=list(PAIRS))
    p.add_argument('--precisions', nargs='+', choices=PRECISIONS, default=list(PRECISIONS))
    p.add_argument('--modes', nargs='+', choices=MODES, default=list(MODES))
    p.add_argument('--sizes', nargs='+', default=None, metavar='HxW',
                   help='input sizes (default 800x1280; --full: 512x512 800x1280 1024x2048)')
    p.add_argument('--threads', nargs='+', type=int, default=None,
                   help='torch CPU threads, one run each (default 1; --full: 1 and all)')
    p.add_argument('--rounds', type=int, default=None, help='interleaved rounds (default 3)')
    p.add_argument('--clock', choices=('auto', 'cpu', 'wall'), default='auto',
                   help="auto: the process's CPU time with one thread (other jobs on a shared "
                        'machine disturb it far less than the wall clock), the wall clock with '
                        'more')
    p.add_argument('--no-launches', action='store_true', help='skip the fake-CUDA op counts')
    p.add_argument('--out-dir', type=Path, default=ROOT / 'work_dirs' / 'precision')
    args = p.parse_args(argv)
    if args.sizes is None:
        args.sizes = [QUICK_SIZE] if args.quick else FULL_SIZES if args.full else [SIZE]
    else:
        try:
            args.sizes = [tuple(int(v) for v in s.lower().split('x')) for s in args.sizes]
        except ValueError:
            p.error('--sizes: use HxW, e.g. 800x1280')
        if any(len(s) != 2 or min(s) < 32 for s in args.sizes):
            p.error('--sizes: use HxW with sides >= 32, e.g. 800x1280')
    if args.threads is None:
        args.threads = [1, os.cpu_count() or 1] if args.full else [1]
    args.threads = list(dict.fromkeys(args.threads))
    args.rounds = args.rounds or (1 if args.quick else 3)
    if args.rounds < 1 or min(args.threads) < 1:
        p.error('--rounds and --threads must be >= 1')
    return args


# ------------------------------------------------------------------------ measuring
def clock_for(choice: str, threads: int) -> Callable[[], float]:
    """The timer of a run with ``threads`` (``--clock``)."""
    cpu = choice == 'cpu' or (choice == 'auto' and threads == 1)
    return time.process_time if cpu else time.perf_counter


def peak_gflops(dtype: torch.dtype, clock=time.perf_counter, sides=(2048, 3072),
                runs: int = 3) -> float:
    """The best GFLOP/s of square matmuls of ``sides`` in ``dtype`` (the dtype's peak)."""
    best = 0.
    for n in sides:
        a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
        a @ b
        for _ in range(runs):
            t = clock()
            a @ b
            best = max(best, 2 * n ** 3 / max(clock() - t, 1e-9) / 1e9)
    return best


def count_gmacs(model: nn.Module, hw: Tuple[int, int]) -> float:
    from inline_mm.analysis.complexity import count_macs
    x = torch.randn(1, 3, *hw)
    _, c = count_macs(model, lambda: model(x))
    return c.macs / 1e9


def variant(model: nn.Module, precision: str) -> nn.Module:
    """The model as it runs in ``precision`` (a bf16 copy for pure bf16)."""
    return copy.deepcopy(model).to(torch.bfloat16) if precision == 'bf16' else model


def make_step(model: nn.Module, x: torch.Tensor, precision: str, mode: str) -> Callable:
    """One forward (``no_grad``) or training step of ``model`` in ``precision``."""
    if precision == 'bf16':
        x = x.to(torch.bfloat16)

    def run():
        with torch.autocast('cpu', torch.bfloat16, enabled=precision == 'bf16-autocast'):
            return model(x)

    if mode == 'forward':
        def step():
            model.eval()
            with torch.no_grad():
                run()
    else:
        def step():
            model.train()
            model.zero_grad(set_to_none=True)
            sum(o.float().square().mean() for o in run()).backward()
    return step


def conversion_share(step: Callable) -> float:
    """Share of ``step``'s self CPU time in :data:`CONVERSION_OPS` (one profiled run)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    conv = sum(e.self_cpu_time_total for e in events if e.key in CONVERSION_OPS)
    return conv / total if total else 0.


def failure(step: Callable) -> Optional[str]:
    """None if ``step`` runs, else a one-line reason (the error's first line)."""
    try:
        step()
    except Exception as err:                                        # noqa: BLE001
        return f'{type(err).__name__}: {str(err).splitlines()[0][:100]}'
    return None


def run_size(args, models: Dict[str, nn.Module], hw: Tuple[int, int], threads: int,
             peaks: Dict[str, float], log=print) -> List[dict]:
    """Every (model, precision, mode) at ``hw`` with ``threads``: interleaved rounds."""
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    x = torch.randn(1, 3, *hw)
    steps, failed = {}, {}
    for name, model in models.items():
        for precision in args.precisions:
            m = variant(model, precision)
            for mode in args.modes:
                step = make_step(m, x, precision, mode)
                why = failure(step)                                    # also the warm-up
                if why is None:
                    steps[name, precision, mode] = step
                else:
                    failed[name, precision, mode] = why
                    log(f'  {name} {precision} {mode}: fails ({why})', flush=True)
    times = {k: [] for k in steps}
    keys = list(steps)
    clock = clock_for(args.clock, threads)
    for r in range(args.rounds):
        k = r % len(keys)                    # each round starts one step further on
        for key in keys[k:] + keys[:k]:
            t = clock()
            steps[key]()
            times[key].append(clock() - t)
        log(f'  round {r + 1}/{args.rounds} done', flush=True)
    shares = {k: conversion_share(steps[k]) for k in keys if k[2] == 'forward'}
    rows = []
    for (name, precision, mode), why in failed.items():
        rows.append(dict(size=f'{hw[0]}x{hw[1]}', threads=threads, model=name,
                         precision=precision, mode=mode, gmacs=args.gmacs[name, hw],
                         seconds='', peak_share='', conversion_share='', status=why))
    for key in keys:
        name, precision, mode = key
        med = statistics.median(times[key])
        peak = peaks['fp32' if precision == 'fp32' else 'bf16']
        share = 2 * args.gmacs[name, hw] / med / peak if mode == 'forward' else ''
        rows.append(dict(size=f'{hw[0]}x{hw[1]}', threads=threads, model=name,
                         precision=precision, mode=mode, gmacs=args.gmacs[name, hw],
                         seconds=med, peak_share=share, conversion_share=shares.get(key, ''),
                         status='ok', times=times[key]))
    return rows


def ratios(rows: Sequence[dict], inline: str, other: str, precision: str, mode: str,
           size: str, threads: int) -> Optional[Tuple[float, float, float]]:
    """Median, min and max of the per-round ratios ``other / inline`` (None if either is
    missing)."""
    def find(name):
        return next((r for r in rows if (r['model'], r['precision'], r['mode'], r['size'],
                                         r['threads']) == (name, precision, mode, size, threads)
                     and r['status'] == 'ok'), None)
    a, b = find(inline), find(other)
    if a is None or b is None:
        return None
    per = [tb / ta for ta, tb in zip(a['times'], b['times'])]
    return statistics.median(per), min(per), max(per)


def table(rows: Sequence[dict], args) -> str:
    """Markdown, one section per (size, threads, mode)."""
    out = []
    for size in dict.fromkeys(r['size'] for r in rows):
        for threads in dict.fromkeys(r['threads'] for r in rows):
            for mode in args.modes:
                sub = [r for r in rows if (r['size'], r['threads'], r['mode']) ==
                       (size, threads, mode)]
                if not sub:
                    continue
                out.append(f'\n{size}, {threads} thread(s), {mode}'
                           + (' (no_grad)' if mode == 'forward' else ' + backward') + ':\n')
                head = ['model', 'GMACs'] + [f'{p} {c}' for p in args.precisions
                                             for c in ('s', 'peak', 'conv', 'InLine vs')]
                out.append('| ' + ' | '.join(head) + ' |')
                out.append('|' + '---|' * len(head))
                for inline, (_, others) in PAIRS.items():
                    if inline not in args.pairs:
                        continue
                    for name in [inline] + [o[0] for o in others]:
                        cells = [name, f'{args.gmacs[name, tuple(map(int, size.split("x")))]:.1f}']
                        for p in args.precisions:
                            r = next((r for r in sub if (r['model'], r['precision']) ==
                                      (name, p)), None)
                            if r is None or r['status'] != 'ok':
                                cells += ['fails' if r is not None else '-', '', '', '']
                                continue
                            cells.append(f'{r["seconds"]:.3f}')
                            cells.append(f'{r["peak_share"]:.0%}' if r['peak_share'] != ''
                                         else '')
                            cells.append(f'{r["conversion_share"]:.1%}'
                                         if r['conversion_share'] != '' else '')
                            q = None if name == inline else ratios(rows, inline, name, p, mode,
                                                                   size, threads)
                            cells.append('' if name == inline else '-' if q is None else
                                         f'{q[0]:.2f}x ({q[1]:.2f}..{q[2]:.2f})')
                        out.append('| ' + ' | '.join(cells) + ' |')
                    if inline in NO_COUNTERPART:
                        out.append(f'| ({NO_COUNTERPART[inline]}) |' + ' |' * (len(head) - 1))
    return '\n'.join(out)


def main(argv=None):
    args = parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    info = machine_info()
    has_bf16, why = bf16_support('cpu')
    print(f'machine: {info["cpu"]}, {info["logical_cores"]} logical cores, torch '
          f'{info["torch"]}' + (f'; load average {info["load_average_start"][0]:.2f}'
                                if 'load_average_start' in info else ''))
    print(f'bf16: {"computed by the CPU" if has_bf16 else "EMULATED (slower than fp32)"} '
          f'({why})')
    print('timings are medians of interleaved rounds; other processes on a shared machine '
          'still add noise; "InLine vs" = counterpart time / InLine time (per-round range)')
    torch.manual_seed(0)
    models: Dict[str, nn.Module] = {}
    for inline, (build, others) in PAIRS.items():
        if inline in args.pairs:
            models[inline] = build(args.quick)
            for name, build_other, _ in others:
                models[name] = build_other(args.quick)
    for m in models.values():
        m.eval()
    torch.set_num_threads(max(args.threads))
    args.gmacs = {(name, hw): count_gmacs(m, hw) for name, m in models.items()
                  for hw in args.sizes}
    rows = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        clock = clock_for(args.clock, threads)
        peaks = {'fp32': peak_gflops(torch.float32, clock),
                 'bf16': peak_gflops(torch.bfloat16, clock)}
        print(f'\n{threads} thread(s), {"CPU" if clock is time.process_time else "wall"} time: '
              f'peak fp32 {peaks["fp32"]:.0f} GFLOP/s, bf16 {peaks["bf16"]:.0f} GFLOP/s (best '
              'square matmul 2048/3072)', flush=True)
        for hw in args.sizes:
            print(f'{hw[0]}x{hw[1]}, {threads} thread(s):', flush=True)
            rows += [dict(r, peak_fp32=peaks['fp32'], peak_bf16=peaks['bf16'])
                     for r in run_size(args, models, hw, threads, peaks)]
    print(table(rows, args))
    outputs = [args.out_dir / 'precision.csv']
    csv_rows = [{k: v for k, v in r.items() if k != 'times'} for r in rows]
    write_dict_rows([dict(r, bf16_units=has_bf16) for r in csv_rows], outputs[0])
    if not args.no_launches:
        counts = launches.autocast_counts(quick=args.quick)
        print('\nfake CUDA, one forward per fresh autocast region (no GPU needed): ops and '
              'dtype conversions per block\n' + launches.autocast_table(counts))
        outputs.append(args.out_dir / 'precision_launches.csv')
        write_dict_rows([c.__dict__ for c in counts], outputs[-1])
    meta = dict(info, bf16_units=has_bf16, bf16_check=why,
                arguments={k: (str(v) if isinstance(v, Path) else v)
                           for k, v in vars(args).items() if k != 'gmacs'},
                outputs=[str(p) for p in outputs])
    (args.out_dir / 'meta.json').write_text(json.dumps(meta, indent=2, default=str))
    print('\nwrote ' + ', '.join(str(p) for p in outputs))


if __name__ == '__main__':
    main()
