#!/usr/bin/env python
"""Parameters and MACs of a config's model at a given input size.

    python tools/analysis_tools/get_flops.py \\
        configs/inline_swin/mask-rcnn_inline-swin-t_fpn_1x_coco.py
    python tools/analysis_tools/get_flops.py CONFIG --shape 512 512 --backbone-only
    python tools/analysis_tools/get_flops.py CONFIG --json          # one JSON object on stdout

Counts run at the PyTorch dispatcher (``inline_mm.analysis.complexity.measure``), so InLine
attention's matrix products and its per-sample depthwise 3x3 conv are counted; a module-hook counter
misses them.  MACs are multiply-accumulates: the unit that mmdet, mmseg and fvcore tables print
under the heading "FLOPs".  FLOPs proper are ``2 x MACs``; both are printed.  Norms, activations and
mmcv's RoIAlign/NMS are not counted (as in those tables).  The model has random weights (no
checkpoint is loaded); for a two-stage detector the heads' figure depends on how many proposals the
RPN keeps (at most ``test_cfg.rpn.max_per_img``, 1000 in the COCO configs; the mask head sees the
first 100), which is printed too.  A Cascade Mask R-CNN's forward runs its three mask heads on every
proposal (inference runs them on the <= 100 detections), so its heads' figure is an upper bound.
Use ``--shape H W`` (default 800 1280, i.e. a 1280x800 image) for detectors and e.g. ``--shape 512
512`` for ADE20K segmentors.
"""
import argparse
import json
import sys

from inline_mm.analysis.complexity import measure


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('config', help='an mmdet or mmseg config file')
    p.add_argument('--shape', type=int, nargs='+', default=[800, 1280], metavar='N',
                   help='input height and width (one value: square); default 800 1280')
    p.add_argument('--backbone-only', action='store_true',
                   help='measure the backbone alone (the figure ARCHITECTURES.md tabulates)')
    p.add_argument('--json', action='store_true', help='print one JSON object instead of text')
    p.add_argument('--cfg-options', nargs='+', default=None, metavar='KEY=VALUE',
                   help='override config entries, as in tools/train.py')
    return p.parse_args(argv)


def _fmt(n, unit):
    return f'{n / 1e9:.2f} G{unit}' if unit else f'{n / 1e6:.2f} M'


def main(argv=None):
    args = parse_args(argv)
    if len(args.shape) == 1:
        shape = (args.shape[0], args.shape[0])
    elif len(args.shape) == 2:
        shape = tuple(args.shape)
    else:
        sys.exit(f'error: --shape takes H W or one side, got {args.shape}')
    if min(shape) < 32:
        sys.exit(f'error: --shape {shape} is too small; the backbones need H, W >= 32')
    from mmengine.config import DictAction
    opts = None
    if args.cfg_options:
        ns = argparse.Namespace()
        DictAction(option_strings=[], dest='o')(None, ns, args.cfg_options)
        opts = ns.o
    try:
        r = measure(args.config, shape, args.backbone_only, opts)
    except ValueError as e:
        sys.exit(f'error: {e}')
    r['flops'] = 2 * r['macs']
    if args.json:
        print(json.dumps(r))
        return
    h, w = shape
    line = '=' * 60
    print(f'{line}\n{args.config}\ninput 1x3x{h}x{w} (H x W; a {w}x{h} image)')
    print(f'params: {_fmt(r["params"], None)}')
    print(f'MACs:   {_fmt(r["macs"], "MACs")}   (what mmdet/mmseg/fvcore tables call FLOPs)')
    print(f'FLOPs:  {_fmt(r["flops"], "FLOPs")}  (= 2 x MACs)')
    print('per part:')
    for name, p in r['parts'].items():
        print(f'  {name:<16} params {_fmt(p["params"], None):>10}   {_fmt(p["macs"], "MACs"):>14}')
    if 'proposals' in r:
        print(f'heads measured on {r["proposals"]} RPN proposals'
              + (f', {r["mask_rois"]} mask RoIs' if 'mask_rois' in r else ''))
    print('not counted: norms, activations, element-wise ops, mmcv RoIAlign/NMS\n' + line)


if __name__ == '__main__':
    main()
