#!/usr/bin/env python
"""Time and peak memory of InLine backbones against their Softmax counterparts.

    python -m benchmarks                  # backbones, 224 .. 1536, CPU (+ CUDA if present)
    python -m benchmarks --attention      # the attention alone, stage 1 of 800x1333
    python -m benchmarks --quick          # CI-sized run of both (seconds)
    python -m benchmarks --deit           # InLine-DeiT-T vs DeiT-T, 224 .. 1536, + split
    python -m benchmarks --padding        # pad_aware=True vs False, 800x1333 and 1024
    python -m benchmarks --floor          # InLineAttention vs its own linears, 16k/65k tokens
    python -m benchmarks --resolution     # backbones and segmentors, 512x1024 .. 2048x4096
    python -m benchmarks --launches       # ops per forward and host reads, B = 1, 2, 8
    python -m benchmarks --deploy         # whole models: ONNX Runtime, OpenVINO vs PyTorch
    python -m benchmarks --memory         # memory per GPU of every shipped recipe (fake tensors)
    python -m benchmarks --memory-check   # that count against a real CPU step, with_cp's time
    python -m benchmarks.compile          # torch.compile on a stream of sizes (compile.py)
    python -m benchmarks.precision        # InLine vs Softmax in fp32, bf16 autocast, pure bf16

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
stage 1 of an 800x1333 image, projections included) against the formula written out
(``benchmarks/reference.py``, what the tests hold both forms to), same weights, in one
process, after checking that both give the same result.

Outputs in ``--out-dir``: ``backbones.csv``, ``backbones.png`` (time against pixels,
log-log), ``attention.csv``, ``meta.json`` (machine, versions, load), and the
tables on stdout. The tool reports figures; what they must reach is tested by
``tests/test_performance.py`` (opt-in: ``INLINE_MM_PERF=1``).

``--deit`` compares InLine-DeiT-T with DeiT-T (mmseg's VisionTransformer of the same width
and depth, with its explicit attention matrix and with torch's fused attention) at 224,
384, 640, 1024 and 1536 the same way, prints the speed-up curve next to the paper's
(Fig. 3c), and splits one InLine-DeiT-T block at 1024x1024 into the attention proper and
the linear layers (``benchmarks.deit``). Outputs: ``deit.csv``, ``deit.png``,
``deit_split.csv``, ``meta.json``.

``--padding`` measures the cost of padding awareness: every family at its ``tiny`` preset,
batch 2, ``pad_aware=True`` against ``False`` (the same model), on batches with no padding
and on a realistic padded batch (one image at the canvas size, one at 3/4 of each side), at
800x1333 and 1024x1024 (canvas: rounded up to a multiple of 32), forward and training, in
interleaved rounds (``benchmarks.padding``); ``--sweep``: batch 2 at 800x1344 and batch 4 at
512x768 instead, the second image at 1/2, 3/4 and 15/16 of each side. Both report wall clock
and CPU time. Outputs: ``padding.csv``, ``meta.json``.

``--resolution`` times whole-image inference at 512x1024, 1024x2048 and 2048x4096, of the
backbones alone and of the shipped Cityscapes segmentors around them (UperNet: InLine-Swin-T,
mmseg's Swin-T and Swin-T-global; Semantic FPN: InLine-PVT-S and PVT-S), each size
predicted from the ones below it (a probe at half the smallest size first) and skipped,
saying so, when a run would exceed ``--max-run-s`` (``benchmarks.resolution``). Outputs:
``resolution.csv``, ``resolution.png``, ``meta.json``.

``--floor`` times InLineAttention against its own qkv and proj linear layers (C=96 with 3
heads and C=384 with 12, at 16k and 65k tokens), forward and forward + backward, and
profiles what the attention adds to them, op by op (``benchmarks.floor``). Outputs:
``floor.csv``, ``floor_profile.csv``, ``meta.json``.

``--launches`` counts the aten ops one forward dispatches (each a kernel launch on a GPU)
and its device-to-host reads, per family and path, at batch 1, 2 and 8, padded and not,
beside mmdet's Swin-T and PVT-T (``benchmarks.launches``). Outputs: ``launches.csv``,
``meta.json``.

``--memory [CONFIG ...]`` counts the memory per GPU of the given configs, or of every shipped Mask
R-CNN, Cascade Mask R-CNN, UperNet, Semantic FPN and SegFormer recipe and three Softmax references,
in training (fp32, AMP, with and without ``with_cp``) and inference, on fake tensors
(``inline_mm.analysis.memory``); ``--memory-check`` runs InLine-Swin-T UperNet for real on the CPU
(batch 2, 512x512, fp32) and compares the count with the allocator's peak of a step per ``with_cp``
setting, with each setting's step time (``benchmarks.memory``). Outputs: ``memory.csv`` /
``memory_check.csv``, ``meta.json``.

The parts live in ``benchmarks``: ``measure`` (timing, memory, prediction),
``backbones``, ``attention``, ``deit``, ``padding`` and ``floor`` (the comparisons); this
file is their command line. ``tools/benchmark.py`` runs the padding, floor and deployment
comparisons in one go.
"""
import argparse
import json
import os
from pathlib import Path
from typing import List, Tuple

import torch

from benchmarks.attention import attention_table, run_attention
from benchmarks.backbones import (FULL_SIZES, MODELS, MODES, QUICK_SIZES, Result,
                                  backbone_tables, build_models, plot_backbones,
                                  run_backbones, write_backbone_csv)
from benchmarks import deit, floor, launches, memory, padding, resolution
from benchmarks.measure import Timer, free_memory, machine_info, write_dict_rows
from inline_mm.models import FAMILIES

ROOT = Path(__file__).resolve().parents[1]


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


#: the parts run instead of the backbone comparison, by flag: what each measures
PARTS = {
    'attention': 'only the attention comparison (production vs reference)',
    'deit': 'InLine-DeiT-T against DeiT-T (plain ViTs) and the attention / linear split of one '
            'block at 1024 (sizes default to 224 384 640 1024 1536)',
    'padding': 'the cost of padding awareness: pad_aware=True against False for every family '
               '(tiny), batch 2, unpadded and padded batches (sizes default to 800x1333 1024)',
    'floor': 'InLineAttention against its own qkv + proj linears at 16k and 65k tokens, '
             'C=96/3 heads and C=384/12 heads, with the profile of what the attention adds',
    'resolution': 'whole-image inference of backbones and Cityscapes segmentors at 512x1024, '
                  '1024x2048, 2048x4096 (sizes default to those; inference only)',
    'launches': 'ops per forward and host reads per family and path, batch 1, 2, 8, padded '
                'and not, beside mmdet Swin-T and PVT-T (counted on the CPU)',
    'deploy': 'whole Mask R-CNN, RetinaNet and UperNet exported (inline_mm.deploy), and the '
              "demo's trained Mask R-CNN: ONNX Runtime and "
              'OpenVINO against PyTorch eager, 1 thread and all cores (benchmarks.deploy_whole; '
              '--threads sets one count); the padded and the canvas-filling graph; PyTorch bf16 '
              'autocast and OpenVINO bf16 where the CPU has bf16 units',
    'memory-check': "the memory count against the CPU allocator on a real step of InLine-Swin-T "
                    "UperNet (batch 2, 512x512), and with_cp's step time",
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog='See the module docstring for what is measured and how.')
    p.add_argument('--quick', action='store_true',
                   help='CI-sized run: backbones at 64x64 and 96x128 and the attention on a '
                        '24x40 map, 2 repeats (checks that everything runs; the timings mean '
                        'little)')
    for flag, text in PARTS.items():
        p.add_argument(f'--{flag}', action='store_true', help=text)
    p.add_argument('--memory', nargs='*', default=None, metavar='CONFIG',
                   help='memory per GPU of these configs (default: every shipped recipe and '
                        'the Softmax references), counted on fake tensors')
    p.add_argument('--compile-backend', default=None,
                   help='with --floor: time module and linears under torch.compile with this '
                        'backend (e.g. inductor)')
    p.add_argument('--conditions', nargs='+', choices=padding.CONDITIONS,
                   default=list(padding.CONDITIONS),
                   help='with --padding: none (every image fills the canvas), padded (image 0 '
                        'fills it, the others are 3/4 of each side)')
    p.add_argument('--sweep', action='store_true',
                   help='with --padding: the sweep instead of --sizes/--conditions/--batch: '
                        'batch 2 at 800x1344 and batch 4 at 512x768, the second image at 1/2, '
                        '3/4 and 15/16 of each side, the others full')
    p.add_argument('--split-only', action='store_true',
                   help='with --deit: only the attention / linear-layer split')
    p.add_argument('--split-repeats', type=int, default=None,
                   help='with --deit: timed runs per part of the split (default 15; --quick 2)')
    p.add_argument('--sizes', nargs='+', type=parse_size, default=None,
                   help='input sizes, N or HxW (default: 224 512 800x1333 1024 1536)')
    p.add_argument('--models', nargs='+',
                   choices=list(MODELS) + list(deit.MODELS) + list(FAMILIES),
                   default=None, help='backbones to compare (default: all of the comparison; '
                                      'with --padding: families)')
    p.add_argument('--modes', nargs='+', choices=MODES, default=list(MODES))
    p.add_argument('--device', choices=['auto', 'cpu', 'cuda', 'all'], default='auto',
                   help='auto: CUDA when present, else CPU; all: CPU and CUDA')
    p.add_argument('--batch', type=int, default=None,
                   help='images per batch (default 1; --padding 2, at least 2)')
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
    if sum(map(bool, (args.padding, args.floor, args.resolution, args.launches,
                      args.deit or args.attention, args.memory is not None,
                      args.memory_check))) > 1:
        p.error('--padding, --floor, --resolution, --launches, --memory, --memory-check and '
                '--deit/--attention are comparisons of their own: choose one')
    if args.batch is None:
        args.batch = 2 if args.padding else 1
    if args.batch < 1 or args.warmup < 0:
        p.error('--batch must be >= 1 and --warmup >= 0')
    if args.padding and args.batch < 2:
        p.error('--padding needs --batch >= 2 (a padded batch holds a smaller image)')
    if args.sweep and not args.padding:
        p.error('--sweep goes with --padding')
    if args.compile_backend and not args.floor:
        p.error('--compile-backend goes with --floor')
    if args.split_only and not args.deit:
        p.error('--split-only goes with --deit')
    choices = (FAMILIES if args.padding or args.launches else deit.MODELS if args.deit else
               resolution.MODELS if args.resolution else MODELS)
    if args.models is None:
        args.models = list(choices)
    elif set(args.models) - set(choices):
        p.error('--models: with --deit choose among ' + ', '.join(deit.MODELS) + '; with '
                '--padding, among ' + ', '.join(FAMILIES) + '; with --resolution, among '
                + ', '.join(resolution.MODELS) + '; otherwise among ' + ', '.join(MODELS))
    if args.sizes is None:
        sizes = ((padding.QUICK_SIZES, padding.FULL_SIZES) if args.padding else
                 (deit.QUICK_SIZES, deit.FULL_SIZES) if args.deit else
                 (resolution.QUICK_SIZES, resolution.FULL_SIZES) if args.resolution else
                 (QUICK_SIZES, FULL_SIZES))
        args.sizes = sizes[0] if args.quick else sizes[1]
    args.sizes = sorted(args.sizes, key=lambda s: s[0] * s[1])
    args.repeats = args.repeats or (2 if args.quick else 5)
    args.attention_repeats = args.attention_repeats or (2 if args.quick else 9)
    if args.repeats < 1 or args.attention_repeats < 1:
        p.error('--repeats and --attention-repeats must be >= 1')
    args.split_repeats = args.split_repeats or (2 if args.quick else 15)
    args.split_size = (96, 96) if args.quick else deit.SPLIT_SIZE
    # The Softmax ViT at 1024-1536 runs for tens of seconds: allow a minute there.
    args.max_run_s = args.max_run_s or (20. if args.quick else 60. if args.deit else 30.)
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
    if args.deploy:
        from benchmarks import deploy_whole
        argv = ['--out-dir', str(args.out_dir)] + (['--quick'] if args.quick else [])
        return deploy_whole.main(argv + (['--threads', str(args.threads)] if args.threads else []))
    if args.threads:
        torch.set_num_threads(args.threads)
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
    part = next((run for flag, run in (('deit', run_deit), ('padding', run_padding),
                                       ('floor', run_floor), ('resolution', run_resolution))
                 if getattr(args, flag)), None)
    if part is not None:
        return part(args, devices, info)
    if args.launches:
        return run_launches(args, info)
    if args.memory is not None or args.memory_check:
        return run_memory(args, info)
    run_backbone_part = not args.attention
    run_attention_part = args.attention or args.quick

    outputs = []
    if run_backbone_part:
        results, mem_methods = _time_backbones(
            args, devices, lambda device: build_models(args.models, device))
        print(backbone_tables(results, args.models))
        csv_path = args.out_dir / 'backbones.csv'
        write_backbone_csv(results, csv_path, args.batch, mem_methods)
        png_path = args.out_dir / 'backbones.png'
        plot_backbones(results, png_path, _plot_title(args, info))
        outputs += [csv_path, png_path]
    if run_attention_part:
        rows = []
        for device in devices:
            rows += run_attention(args, device)
        print(attention_table(rows))
        att_path = args.out_dir / 'attention.csv'
        write_dict_rows(rows, att_path)
        outputs.append(att_path)
    _write_meta(args, info, outputs)


def _time_backbones(args, devices, build):
    """The backbones ``build(device)`` makes, timed on each device in turn (one device's
    models freed before the next's are built); the results and each device's memory method."""
    results: List[Result] = []
    mem_methods = {}
    for device in devices:
        models = build(device)
        print(f'\n{device.type.upper()}: sizes {", ".join(f"{h}x{w}" for h, w in args.sizes)}; '
              f'{args.warmup} warm-up + {args.repeats} timed runs each, batch {args.batch}')
        results += run_backbones(args, device, models)
        mem_methods[device.type] = Timer(device).mem_method
        del models
        free_memory(device)
    return results, mem_methods


def _plot_title(args, info) -> str:
    return (f'{info["cpu"]}, torch {info["torch"]}, {torch.get_num_threads()} thread(s), '
            f'batch {args.batch}' + (f', GPU {info["cuda"]}' if info['cuda'] else ''))


def run_deit(args, devices, info):
    """``--deit``: the plain-ViT comparison, its speed-up table and plot, and the split."""
    outputs = []
    if not args.split_only:
        results, mem_methods = _time_backbones(args, devices, lambda device: {
            name: deit.MODELS[name][0]().to(device) for name in args.models})
        print(deit.ratio_table(results, args.models))
        csv_path, png_path = args.out_dir / 'deit.csv', args.out_dir / 'deit.png'
        deit.write_csv(results, csv_path, args, mem_methods)
        deit.plot(results, png_path, _plot_title(args, info))
        outputs += [csv_path, png_path]
    rows = []
    for device in devices:
        rows += deit.run_split(args, device)
    print(deit.split_table(rows, args.quick))
    split_path = args.out_dir / 'deit_split.csv'
    write_dict_rows(rows, split_path)
    outputs.append(split_path)
    _write_meta(args, info, outputs)


def _write_meta(args, info, outputs):
    if hasattr(os, 'getloadavg'):
        info['load_average_end'] = os.getloadavg()
    info['arguments'] = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    meta = args.out_dir / 'meta.json'
    meta.write_text(json.dumps(info, indent=2, default=str))
    print('\nwrote ' + ', '.join(str(p) for p in list(outputs) + [meta]))


def run_floor(args, devices, info):
    """``--floor``: the module against its own linears, and the profile of the rest."""
    cases = floor.QUICK_CASES if args.quick else floor.FULL_CASES
    rows, prof_rows = [], []
    for device in devices:
        print(f'\n{device.type.upper()}: {args.warmup} warm-up + {args.repeats} interleaved '
              'rounds per case', flush=True)
        r, p = floor.run_floor(cases, args.repeats, args.warmup, device,
                               backend=args.compile_backend)
        rows, prof_rows = rows + r, prof_rows + p
    print(floor.floor_table(rows))
    paths = [args.out_dir / 'floor.csv']
    if prof_rows:
        print(floor.profile_table(prof_rows))
        paths.append(args.out_dir / 'floor_profile.csv')
    floor.write_floor_csv(rows, prof_rows, *paths)
    _write_meta(args, info, paths)


def run_launches(args, info):
    """``--launches``: ops per forward and host reads (counted on the CPU: the ops a
    forward dispatches are the same on every device)."""
    size = launches.QUICK_SIZE if args.quick else launches.SIZE
    print(f'\nops per no_grad forward, {"smoke" if args.quick else "tiny"} presets, '
          f'{size[0]}x{size[1]} canvas; padded: image i of B is 1 - i/(2B) of each side',
          flush=True)
    rows = launches.run(args.models, quick=args.quick)
    print(launches.table(rows))
    path = args.out_dir / 'launches.csv'
    launches.write_csv(rows, path)
    _write_meta(args, info, [path])


def run_resolution(args, devices, info):
    """``--resolution``: whole-image inference of backbones and segmentors by size."""
    results, mem_methods = [], {}
    for device in devices:
        results += resolution.run(args, device)
        mem_methods[device.type] = Timer(device).mem_method
    print(resolution.table(results, args.models))
    csv_path, png_path = args.out_dir / 'resolution.csv', args.out_dir / 'resolution.png'
    resolution.write_csv(results, csv_path, args.batch, mem_methods)
    resolution.plot(results, png_path, _plot_title(args, info))
    _write_meta(args, info, [csv_path, png_path])


def run_padding(args, devices, info):
    """``--padding``: pad_aware=True against False, per family, size, condition and mode."""
    results, mem_methods = [], {}
    for device in devices:
        print(f'\n{device.type.upper()}: {", ".join(args.models)} '
              f'({"smoke" if args.quick else "tiny"}); '
              + ('the sweep (batch 2 at 800x1344, batch 4 at 512x768; second image at '
                 + ', '.join(padding.SWEEP_FRACTIONS) + ' of each side); ' if args.sweep else
                 'canvases ' + ', '.join(f'{h}x{w}' for h, w in map(padding.canvas, args.sizes))
                 + f', batch {args.batch}; ')
              + f'{args.warmup} warm-up + {args.repeats} timed runs of each variant',
              flush=True)
        results += padding.run(args, device)
        mem_methods[device.type] = Timer(device).mem_method
    print(padding.padding_table(results))
    csv_path = args.out_dir / 'padding.csv'
    padding.write_csv(results, csv_path, args.batch, mem_methods)
    _write_meta(args, info, [csv_path])


def run_memory(args, info):
    """``--memory``: the count per recipe; ``--memory-check``: the count against a real step."""
    if args.memory_check:
        options = {'model.data_preprocessor.size': (128, 128)} if args.quick else None
        print('\nInLine-Swin-T UperNet, fp32, batched path, on the CPU: the count against the '
              'CPU allocator, per with_cp setting', flush=True)
        rows = memory.check(cfg_options=options, rounds=1 if args.quick else args.repeats)
        print(memory.check_table(rows))
        path = args.out_dir / 'memory_check.csv'
    else:
        names = {}
        configs = args.memory
        if not configs:
            configs = memory.shipped_recipes()[:2] if args.quick else (
                memory.shipped_recipes() + list(memory.REFERENCES.values()))
            names = {v: k for k, v in memory.REFERENCES.items()}
        print(f'\nmemory per GPU of {len(configs)} config(s), counted on fake CUDA tensors',
              flush=True)
        rows = memory.count_rows(configs, names)
        print(memory.table(rows))
        path = args.out_dir / 'memory.csv'
    memory.write(rows, path)
    _write_meta(args, info, [path])


if __name__ == '__main__':
    main()
