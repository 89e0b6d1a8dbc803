#!/usr/bin/env python
"""Exact attention maps of one InLine block for chosen queries of an image.

    python tools/attention_map.py \\
        --config configs/inline_swin/mask-rcnn_inline-swin-t_fpn_1x_coco.py \\
        --checkpoint inline://swin_t --image demo.jpg --points 120,80 300,200 --out map.png
    python tools/attention_map.py --model InLineSwin --arch tiny --checkpoint inline_swin_t.pth \\
        --image demo.jpg --grid 3 --stage 0 --block 1 --out map.png

One row per query, columns: the image with the query marked; InLine's weights over the
keys ((s/n) q.(k - mean k) + 1/n); normalised linear attention's (ReLU kernel where the
block's is the identity); Softmax's (softmax(s q.k)), all on the block's own q and k over
the image's tokens, overlaid on the image; the block's local 3x3 kernel. The formulas and
the choices behind them: inline_mm/visualization/attention_maps.py. ``--query-scales 1 2`` adds, for
every point, the same query with q doubled: one linear row, two InLine rows. ``--npz FILE``
also writes the weights themselves (what the app, ``python -m inline_mm.app``, offers for a
click). The page: docs/attention_maps.md.
"""
import argparse
import json
import sys

from inline_mm.visualization.attention_maps import (AttentionSiteError, Preprocess, attention_maps,
                                                    build_backbone, capture_attention, grid_points,
                                                    load_image, map_stride, point_to_cell,
                                                    prepare_image)
from inline_mm.visualization.attention_views import draw_figure, save_maps
from inline_mm.models import CheckpointError


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument('--config', help='an mmdet/mmseg config: its model.backbone is mapped')
    src.add_argument('--model', help='a backbone family (InLineSwin, InLinePVT, InLineCSwin, '
                     'InLineDeiT; with --arch) or a timm-style name (inline_swin_tiny)')
    p.add_argument('--arch', default='tiny', help='preset for --model, or smoke (tiny test '
                   'model); default: tiny')
    p.add_argument('--checkpoint', help='official ImageNet file, trained mm checkpoint, '
                   "converted file or inline://<name> (default: the config's init_cfg)")
    p.add_argument('--random-weights', action='store_true',
                   help='randomly initialised weights (seed --seed): the mechanics only')
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--image', required=True, help='the image file')
    q = p.add_mutually_exclusive_group(required=True)
    q.add_argument('--points', nargs='+', metavar='X,Y',
                   help='queries in pixel coordinates of the image')
    q.add_argument('--grid', type=int, metavar='N', help='N x N evenly spaced queries')
    p.add_argument('--cls-query', action='store_true',
                   help="add InLine-DeiT's class token as a query")
    p.add_argument('--query-scales', type=float, nargs='+', default=[1.0], metavar='F',
                   help='repeat every query with q times each factor (default: 1)')
    p.add_argument('--stage', type=int, default=0, help='stage of the block (default: 0)')
    p.add_argument('--block', type=int, default=0, help='block within the stage (default: 0)')
    p.add_argument('--branch', type=int, default=0,
                   help='InLine branch of an InLine-CSwin block (default: 0)')
    p.add_argument('--head', type=int, default=None, help='one head (default: mean over heads)')
    p.add_argument('--size', type=int, default=None, metavar='S',
                   help="resize to short side S keeping the aspect (default: the config's test "
                   'Resize; 224 with --model)')
    p.add_argument('--out', default='attention_map.png', help='the PNG to write')
    p.add_argument('--npz', metavar='FILE', help='also write the exact weights (float64: per '
                   'query its map of each method, the kernel, the cells) to FILE')
    p.add_argument('--json', action='store_true', help='print a JSON summary on stdout')
    return p.parse_args(argv)


def parse_point(text):
    try:
        x, y = (float(v) for v in text.split(','))
    except ValueError:
        raise ValueError(f'--points takes X,Y pairs in pixels, got {text!r}') from None
    return x, y


def main(argv=None):
    args = parse_args(argv)
    if args.checkpoint and args.random_weights:
        sys.exit('attention_map: error: --checkpoint and --random-weights exclude each other')
    try:
        image = load_image(args.image)
        ih, iw = image.shape[:2]
        points = ([parse_point(t) for t in args.points] if args.points
                  else grid_points(args.grid, (ih, iw)))
        for pt in points:                   # refuse before the model is built
            point_to_cell(pt, (ih, iw), (ih, iw), 1, (ih, iw))
        backbone, cfg = build_backbone(args.config, args.model, args.arch, args.checkpoint,
                                       args.random_weights, args.seed)
        pre = Preprocess.from_config(cfg) if cfg is not None else Preprocess(short_side=224)
        if args.size is not None:
            pre.short_side = args.size
        x, resized = prepare_image(image, pre)
        cap = capture_attention(backbone, x, args.stage, args.block, args.branch,
                                valid_sizes=[resized])
        stride = map_stride(cap.input_hw, cap.hw)
        cells = [point_to_cell(pt, (ih, iw), resized, stride, cap.grid_of(0)) for pt in points]
        queries, rows = list(cells), list(points)
        if args.cls_query:
            if not cap.num_prefix_tokens:
                raise ValueError('--cls-query: this backbone has no class token')
            queries, rows = [0] + queries, [None] + rows
        scales = [f for _ in queries for f in args.query_scales]
        queries = [q for q in queries for _ in args.query_scales]
        rows = [r for r in rows for _ in args.query_scales]
        maps = attention_maps(cap, queries, head=args.head, query_scales=scales)
    except (FileNotFoundError, CheckpointError, AttentionSiteError, ValueError) as e:
        sys.exit(f'attention_map: error: {e}')
    name = type(backbone).__name__
    what = 'mean over heads' if args.head is None else f'head {args.head}'
    weights = 'RANDOM weights (mechanics only)' if args.random_weights else (
        args.checkpoint or 'config weights')
    title = (f'{name} ({backbone.arch_name}) stage {args.stage} block {args.block}: '
             f'{cap.path}, {maps.grid[0]}x{maps.grid[1]} tokens, {what}; {weights}\n'
             f'spread of the queries\' distributions (mean TV distance): '
             + ', '.join(f'{m} {maps.spread(m):.3f}' for m in ('inline', 'linear', 'softmax')))
    draw_figure(maps, image, rows, resized, args.out, title)
    if args.npz:
        save_maps(args.npz, maps, rows, (ih, iw), resized, cap.path)
    summary = dict(out=args.out, backbone=name, arch=backbone.arch_name, module=cap.path,
                   grid=list(maps.grid), stride=maps.stride, queries=len(maps.queries),
                   linear_kernel=maps.linear_kernel, floored_linear_rows=maps.floored,
                   spread={m: maps.spread(m) for m in ('inline', 'linear', 'softmax')})
    print(json.dumps(summary) if args.json else f'wrote {args.out}: {len(rows)} queries, '
          f'{maps.grid[0]}x{maps.grid[1]} tokens of {cap.path}')


if __name__ == '__main__':
    main()
