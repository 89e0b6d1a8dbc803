#!/usr/bin/env python
"""The three performance figures of docs/performance.md in one run::

    OMP_NUM_THREADS=1 python tools/benchmark.py                 # all three (about an hour here)
    OMP_NUM_THREADS=1 python tools/benchmark.py --only floor    # one of padding, floor, deploy
    python tools/benchmark.py --quick                           # CI-sized: checks that it all runs

* ``padding``: padding awareness against ``pad_aware=False`` on a padded mmdet batch
  (every family, 800x1333 on its 800x1344 canvas, batch 2), inference and training
  (``python -m benchmarks --padding``);
* ``floor``: InLineAttention against its own qkv + proj linear layers at 16k and 65k
  tokens, C=96/3 heads and C=384/12 heads, with the profile of what the attention adds
  (``python -m benchmarks --floor``);
* ``deploy``: ONNX Runtime against eager PyTorch for InLine-Swin-T, Swin-T, InLine-PVT-S
  and PVT-S at 800x1333 (``python -m benchmarks.deploy``).

Each part runs as its own process (``python -m benchmarks ...`` from the repository
root, so that one part's memory does not weigh on the next), prints its tables and
writes its CSV and ``meta.json`` (machine, load, arguments) under ``--out-dir/<part>``.
"""
import argparse
import subprocess
import sys
from pathlib import Path

PARTS = ('padding', 'floor', 'deploy')
ROOT = Path(__file__).resolve().parents[1]


def part_args(part: str, args) -> list:
    """The command line of ``part`` for this run."""
    out = ['--out-dir', str(args.out_dir / part)]
    quick = ['--quick'] if args.quick else []
    if part == 'padding':
        sizes = [] if args.quick else ['--sizes', '800x1333']
        repeats = ['--repeats', str(args.repeats)] if args.repeats else []
        return ['--padding', '--conditions', 'padded', *sizes, *repeats, *quick, *out]
    if part == 'floor':
        repeats = ['--repeats', str(args.repeats)] if args.repeats else []
        return ['--floor', *repeats, *quick, *out]
    rounds = ['--rounds', str(args.repeats)] if args.repeats else []
    return [*rounds, *quick, *out]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--only', nargs='+', choices=PARTS, default=list(PARTS),
                   help='the parts to run (default: all three, in this order)')
    p.add_argument('--repeats', type=int, default=None,
                   help='interleaved rounds of every part (default: each part\'s own: 5, 5, 7)')
    p.add_argument('--quick', action='store_true', help='CI-sized runs of every part')
    p.add_argument('--out-dir', type=Path, default=ROOT / 'work_dirs' / 'benchmark')
    args = p.parse_args(argv)
    if args.repeats is not None and args.repeats < 1:
        p.error('--repeats must be >= 1')
    failed = []
    for part in args.only:
        cmd = ['-m', 'benchmarks.deploy' if part == 'deploy' else 'benchmarks',
               *part_args(part, args)]
        print(f'\n======== {part}: python {" ".join(cmd)}', flush=True)
        if subprocess.run([sys.executable, *cmd], cwd=ROOT).returncode:
            failed.append(part)
    if failed:
        raise SystemExit(f'tools/benchmark.py: {", ".join(failed)} failed (its output is above)')


if __name__ == '__main__':
    main()
