#!/usr/bin/env python
"""How much an image's backbone features depend on its batch mates' padding.

    python tools/analysis_tools/padding_features.py  # the four tiny presets, both cases
    python tools/analysis_tools/padding_features.py --families InLineSwin --cases small

mmdet and mmseg zero-pad the images of a batch to one size. For each family (the real
``tiny`` preset, random weights from seed 0, eval mode) and each case, an image A is
run alone (zero-padded to a multiple of 32, as a batch of one is) and inside a
larger zero-padded batch next to a bigger image; the table gives, per output, the
relative max error ``max |batched - alone| / max |alone|`` on A's region, with
``pad_aware=False`` (every statistic over the whole padded map, the behaviour before
padding awareness) and ``pad_aware=True`` (the default).

Cases (A's size, alone canvas, batch canvas):

  small  200x296 in 224x320 alone; in 320x448 next to a 320x448 image
  coco   800x1067 in 800x1088 alone; in 1088x1088 next to a 1067x800 (portrait) image

Random weights show the mechanism, not a trained model's sensitivity; relative errors
of ~1e-7 are float32 rounding.
"""
import argparse
import time

import torch

from inline_mm.models import FAMILIES

CASES = {
    'small': dict(a=(200, 296), alone=(224, 320), other=(320, 448), batch=(320, 448)),
    'coco': dict(a=(800, 1067), alone=(800, 1088), other=(1067, 800), batch=(1088, 1088)),
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--families', nargs='+', default=list(FAMILIES), choices=list(FAMILIES))
    p.add_argument('--cases', nargs='+', default=list(CASES), choices=list(CASES))
    p.add_argument('--arch', default='tiny', help='preset of every family (default: tiny)')
    p.add_argument('--smoke', action='store_true',
                   help="the families' tiny smoke models instead of a preset (for tests)")
    return p.parse_args(argv)


def padded(images, hw):
    batch = torch.zeros(len(images), 3, *hw)
    for i, img in enumerate(images):
        batch[i, :, :img.shape[1], :img.shape[2]] = img
    return batch


def relative_errors(model, case):
    """Per output: relative max error on A's region, batched vs alone."""
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(3, *case['a'], generator=gen)
    other = torch.randn(3, *case['other'], generator=gen)
    with torch.no_grad():
        alone = model(padded([a], case['alone']))
        batched = model(padded([other, a], case['batch']))
    family = FAMILIES[type(model).__name__]
    errors = []
    for i, x, y in zip(model.out_indices, alone, batched):
        s = family.stride(i)
        h, w = -(-case['a'][0] // s), -(-case['a'][1] // s)      # A's cells at this stride
        ref = x[0, :, :h, :w]
        errors.append(float((y[1, :, :h, :w] - ref).abs().max() / ref.abs().max()))
    return errors


def main(argv=None):
    args = parse_args(argv)
    torch.manual_seed(0)
    print(f'torch {torch.__version__}, {torch.get_num_threads()} thread(s); relative max error '
          'of A\'s features, batched vs alone, per output')
    print('| backbone | case | pad_aware=False | pad_aware=True |')
    print('|---|---|---|---|')
    for name in args.families:
        family = FAMILIES[name]
        torch.manual_seed(0)
        kwargs = dict(family.smoke) if args.smoke else dict(arch=args.arch, drop_path_rate=0.)
        model = family.cls(**kwargs).eval()
        label = f'{name}-{"smoke" if args.smoke else args.arch}'
        for case_name in args.cases:
            t0 = time.time()
            row = {}
            for aware in (False, True):
                model.pad_aware = aware
                row[aware] = relative_errors(model, CASES[case_name])
            fmt = lambda errs: ' / '.join(f'{e:.1e}' for e in errs)  # noqa: E731
            print(f'| {label} | {case_name} | {fmt(row[False])} | {fmt(row[True])} |  '
                  f'({time.time() - t0:.0f} s)', flush=True)


if __name__ == '__main__':
    main()
