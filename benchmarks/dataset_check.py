#!/usr/bin/env python
"""Time tools/misc/check_dataset.py on an ADE20K-like set: full decode on 1 and 2 threads,
and --quick; prints medians and the linear extrapolation to ADE20K's 25,574 pairs.

    python benchmarks/dataset_check.py                  # 2,000 pairs, 3 repeats
    python benchmarks/dataset_check.py --pairs 500 --repeats 1

The set is written to a temporary folder: JPEG images of 683x512 at quality 90
(ADE20K's typical size; smooth texture plus noise, ~100 kB each, as photos are) and
8-bit PNG masks of blocky regions with up to 150 labels.
"""
import argparse
import json
import re
import os
import os.path as osp
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
from PIL import Image

ADE20K_PAIRS = 25574
TOOL = osp.join(osp.dirname(osp.dirname(osp.abspath(__file__))), 'check_dataset.py')


def make_set(root: str, pairs: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:512, 0:683].astype(np.float32)
    os.makedirs(osp.join(root, 'images', 'train'))
    os.makedirs(osp.join(root, 'masks', 'train'))
    for i in range(pairs):
        wave = np.sin(xx / rng.uniform(5, 40) + yy / rng.uniform(5, 40) + rng.uniform(0, 6))
        img = wave[..., None] * rng.uniform(40, 120, 3) + 128 + rng.normal(0, 12, (512, 683, 3))
        Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(
            osp.join(root, 'images', 'train', f'{i:06d}.jpg'), quality=90)
        cell = int(rng.integers(16, 128))
        labels = ((xx // cell) * 7 + (yy // cell) * 13 + rng.integers(0, 150)) % 150
        Image.fromarray(labels.astype(np.uint8)).save(
            osp.join(root, 'masks', 'train', f'{i:06d}.png'))
    with open(osp.join(root, 'meta.json'), 'w') as f:
        json.dump({'classes': [f'c{i}' for i in range(150)]}, f)


def run_once(root: str, extra):
    """(wall seconds of one run in a fresh process, start-up included; seconds the tool
    reports for the check itself; its 'checked ...' line)."""
    start = time.perf_counter()
    out = subprocess.run([sys.executable, TOOL, root, '--splits', 'train', '--quiet', *extra],
                         capture_output=True, text=True)
    wall = time.perf_counter() - start
    if out.returncode != 0:
        raise SystemExit(f'check failed:\n{out.stdout}\n{out.stderr}')
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith('checked '))
    return wall, float(re.search(r' in ([\d.]+) s', line)[1]), line


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--pairs', type=int, default=2000)
    p.add_argument('--repeats', type=int, default=3)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as root:
        t = time.perf_counter()
        make_set(root, args.pairs)
        size = sum(osp.getsize(osp.join(d, f)) for d, _, fs in os.walk(root) for f in fs)
        print(f'{args.pairs} pairs, {size / 1e6:.0f} MB, written in '
              f'{time.perf_counter() - t:.0f} s; medians of {args.repeats} run(s):')
        for name, extra in (('full, --jobs 1', ['--jobs', '1']),
                            ('full, --jobs 2', ['--jobs', '2']),
                            ('--quick', ['--quick'])):
            runs = [run_once(root, extra) for _ in range(args.repeats)]
            wall = statistics.median(r[0] for r in runs)
            check = statistics.median(r[1] for r in runs)
            # The check grows with the files; the start-up (imports) does not.
            ade = wall - check + check * ADE20K_PAIRS / args.pairs
            print(f'  {name:15s} {wall:6.1f} s wall, {check:6.1f} s checking '
                  f'({runs[-1][2]}); ADE20K ({ADE20K_PAIRS:,} pairs): ~{ade / 60:.1f} min')


if __name__ == '__main__':
    main()
