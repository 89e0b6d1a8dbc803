"""GPU memory a config needs per GPU, in training and inference, counted before the run.

    python tools/analysis_tools/estimate_memory.py CONFIG              # fp32, fp16 and bf16
    python tools/analysis_tools/estimate_memory.py CONFIG --with-cp off on 0,1
    python tools/analysis_tools/estimate_memory.py CONFIG --batch 4 --precision fp16
    python tools/analysis_tools/estimate_memory.py CONFIG --json       # a JSON object per config

The model runs on fake CUDA tensors (no GPU, no compute: seconds per count), at the config's
own training input and batch per GPU: its crop (segmentation), or the largest image its
training pipeline makes, padded as its data preprocessor pads (detection). Training: the
parameters, their gradients, the optimiser's state and the activations autograd keeps for
the backward pass, and the estimated peak of a step; inference: the test loop's batch at the
size its test pipeline resizes to. ``--with-cp`` sets the backbone's ``with_cp``: ``off``,
``on`` (every stage) or stage indices (``0,1``: the first two). How it counts and what it
cannot see (allocator rounding, cuDNN workspaces, the CUDA context: keep 1-2 GiB free):
``inline_mm.analysis.memory``; how it compares with a real step: docs/training_at_scale.md.
"""
import argparse
import json
import sys
from typing import List

from inline_mm.cli import doc_parser

GB = 2 ** 30      # GiB, as mmengine logs memory and card makers size cards


def parse_with_cp(text: str):
    """``off`` / ``on`` / ``0,1`` (stage indices) -> False / True / [0, 1]."""
    if text in ('off', 'false', 'False'):
        return False
    if text in ('on', 'true', 'True'):
        return True
    try:
        return [int(i) for i in text.split(',')]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f'--with-cp {text!r}: use off, on or stage indices such as 0,1') from None


def parse_args(argv=None):
    from inline_mm.analysis.memory import PRECISIONS
    p = doc_parser(__doc__)
    p.add_argument('config', nargs='+', help='mmdet or mmseg config file(s)')
    p.add_argument('--precision', nargs='+', choices=list(PRECISIONS),
                   default=list(PRECISIONS),
                   help='fp32, and fp16 / bf16 mixed precision (AmpOptimWrapper); default all')
    p.add_argument('--with-cp', nargs='+', type=parse_with_cp, default=[False],
                   metavar='off|on|I,J', help="the backbone's with_cp: off (default), on, or "
                                              'the stages to checkpoint')
    p.add_argument('--shape', type=int, nargs=2, default=None, metavar=('H', 'W'),
                   help='training input size (default: the config\'s)')
    p.add_argument('--batch', type=int, default=None,
                   help='training images per GPU (default: train_dataloader.batch_size)')
    p.add_argument('--no-inference', action='store_true', help='training only')
    p.add_argument('--json', action='store_true', help='one JSON object per config')
    p.add_argument('--cfg-options', nargs='+', default=None, metavar='KEY=VALUE',
                   help='override config entries, as in tools/train.py')
    args = p.parse_args(argv)
    if args.batch is not None and args.batch < 1:
        p.error('--batch must be >= 1')
    if args.shape is not None and min(args.shape) < 32:
        p.error(f'--shape {args.shape}: the backbones need H, W >= 32')
    return args


def _cp(value) -> str:
    return 'on' if value is True else 'off' if value is False else ','.join(map(str, value))


def report(result: dict) -> List[str]:
    """The lines printed for one config's :func:`inline_mm.analysis.memory.count` result."""
    train, test = result['train'], result['test']
    first = train[0]
    h, w = first.input_hw
    lines = [result['config'],
             f'{result["kind"]}; training {first.batch} x {h}x{w} per GPU (HxW); GiB',
             f'{"precision":<10}{"with_cp":<9}{"params":>8}{"grads":>8}{"optim":>8}'
             f'{"activ.":>9}{"peak":>9}']
    for r in train:
        lines.append(f'{r.precision:<10}{_cp(r.with_cp):<9}{r.params / GB:>8.2f}'
                     f'{r.grads / GB:>8.2f}{r.optimizer / GB:>8.2f}{r.activations / GB:>9.2f}'
                     f'{r.peak / GB:>9.2f}')
    for r in test:
        th, tw = r.input_hw
        lines.append(f'inference {r.precision}: {r.batch} x {th}x{tw}: {r.peak / GB:.2f} GiB')
    lines.append('not counted: the CUDA context and cuDNN workspaces (keep 1-2 GiB free), '
                 'allocator rounding')
    return lines


def main(argv=None) -> int:
    args = parse_args(argv)
    from inline_mm.analysis.memory import count
    opts = None
    if args.cfg_options:
        from mmengine.config import DictAction
        ns = argparse.Namespace()
        DictAction(option_strings=[], dest='o')(None, ns, args.cfg_options)
        opts = ns.o
    status = 0
    for config in args.config:
        try:
            result = count(config, args.precision, args.with_cp, opts,
                           tuple(args.shape) if args.shape else None, args.batch,
                           inference=not args.no_inference)
        except (ValueError, FileNotFoundError) as e:
            print(f'error: {config}: {e}', file=sys.stderr)
            status = 1
            continue
        if args.json:
            print(json.dumps(dict(result, train=[r.as_dict() for r in result['train']],
                                  test=[r.as_dict() for r in result['test']])))
        else:
            print('\n'.join(report(result)) + '\n')
    return status


if __name__ == '__main__':
    sys.exit(main())
