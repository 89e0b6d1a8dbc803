"""Export an InLine backbone, or a whole detector or segmentor, to ONNX for one input size
(dynamic batch), and check it with ONNX Runtime against PyTorch.

    inline-mm-export-onnx --family InLineSwin --arch tiny \\
        --checkpoint inline://swin_t --size 224 224 --out inline_swin_t_224.onnx
    inline-mm-export-onnx configs/inline_swin/mask-rcnn_inline-swin-t_fpn_1x_coco.py \\
        --size 800 1216 --out swin_t_800x1216.onnx          # the config's backbone
    inline-mm-export-onnx --family InLinePVT --arch smoke --size 64 96 --bench
    inline-mm-export-onnx configs/inline_swin/mask-rcnn_inline-swin-t_fpn_1x_coco.py \\
        --whole --checkpoint mask_rcnn.pth --size 800 1344      # the whole detector

``--whole`` exports the config's whole detector (Faster / Mask R-CNN, RetinaNet) or
segmentor (UperNet) with its preprocessing and post-processing (``inline_mm.deploy``,
docs/deploy.md): inputs ``input`` and each image's ``sizes``, outputs ``dets``, ``labels``
(and ``masks``) or ``seg``; the check runs ONNX Runtime against PyTorch on a padded batch
of random images.  ``--canvas filled`` exports the graph for batches whose every image has
the ``--size`` exactly, without the padding masks (faster; recorded in the file, and
``OnnxModel`` refuses smaller images for it).  A graph is made for one height and width
(``inline_mm.deploy.backbone`` says why) and refuses any other; the batch is free.
TorchScript exporter (``dynamo=False``), opset 17 by default.  ``--arch smoke`` is the
family table's tiny test model.  With
``--checkpoint`` the file goes through the project's safe loader (official,
converted or mm checkpoints).  The backbone check runs ONNX Runtime (CPU) at each
``--batches`` size against PyTorch eager and fails above ``--atol``; ``--bench``
also prints median CPU seconds per forward of both.
"""
import argparse
import json
import sys
from pathlib import Path


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('config', nargs='?',
                   help='an mmdet/mmseg config whose backbone (with --whole: model) to export')
    p.add_argument('--family', help='backbone class instead of a config, e.g. InLineSwin')
    p.add_argument('--arch', default='tiny', help="preset, or 'smoke' (the family table's "
                   'tiny model); with --family. Default: tiny')
    p.add_argument('--checkpoint', help='weights (official, converted or mm checkpoint): a '
                   'path, a URL or a short name such as inline://swin_t')
    p.add_argument('--whole', action='store_true',
                   help="the config's whole detector or segmentor with its post-processing "
                        '(docs/deploy.md), not its backbone; the checkpoint is then a trained '
                        'mm checkpoint of that model')
    p.add_argument('--size', type=int, nargs=2, required=True, metavar=('H', 'W'),
                   help='input height and width the graph is made for')
    p.add_argument('--canvas', choices=['padded', 'filled'], default='padded',
                   help="with --whole: 'padded' (default), images of any size up to --size, "
                        "each computed as alone; 'filled', every image of --size exactly, "
                        'without the padding masks (faster)')
    p.add_argument('--out', help='output .onnx path (default: <family>_<arch>_<H>x<W>.onnx)')
    p.add_argument('--opset', type=int, default=17)
    p.add_argument('--batches', type=int, nargs='+', default=[1, 2],
                   help='batch sizes checked with ONNX Runtime (default 1 2)')
    p.add_argument('--atol', type=float, default=1e-4)
    p.add_argument('--no-check', action='store_true', help='skip the ONNX Runtime check')
    p.add_argument('--bench', action='store_true',
                   help='median CPU time per forward, ONNX Runtime vs PyTorch eager')
    p.add_argument('--threads', type=int, default=None, help='CPU threads for both, in --bench')
    return p.parse_args(argv)


def build_backbone(args):
    from inline_mm.apis import init_backbone
    if not (args.config or args.family):
        raise SystemExit('error: give a config or --family')
    model, _ = init_backbone(args.config, None if args.config else args.family, args.arch,
                             args.checkpoint)
    init_cfg = model.init_cfg
    if args.checkpoint is None and isinstance(init_cfg, dict) and init_cfg.get('checkpoint'):
        print(f'note: not loading the config\'s init_cfg ({init_cfg["checkpoint"]}); '
              'pass --checkpoint', file=sys.stderr)
    arch = getattr(model, 'arch_name', 'custom') if args.config else args.arch
    return model, f'{type(model).__name__}_{arch}'


def export_whole(args):
    """``--whole``: the config's detector or segmentor with its post-processing
    (:mod:`inline_mm.deploy`), checked against PyTorch on a padded batch."""
    from inline_mm.apis import init_model
    from inline_mm.deploy import NotExportable, build_graph, export_graph
    from inline_mm.models import CheckpointError
    from inline_mm.deploy.evaluate import check_export
    if not args.config:
        raise SystemExit('error: --whole needs a config')
    h, w = args.size
    try:
        model = init_model(args.config, args.checkpoint)
        graph = build_graph(model, (h, w), args.canvas)
    except (NotExportable, CheckpointError) as e:
        raise SystemExit(f'error: {e}')
    if args.checkpoint is None:
        print('note: no --checkpoint: the file holds randomly initialised weights',
              file=sys.stderr)
    classes = (getattr(model, 'dataset_meta', None) or {}).get('classes')
    out = args.out or f'{Path(args.config).stem}_{h}x{w}.onnx'
    export_graph(graph, out, opset=args.opset, classes=classes,
                 extra=dict(config=Path(args.config).name))
    report = dict(onnx=out, size=[h, w], canvas=graph.canvas, opset=args.opset,
                  task=graph.task, outputs=graph.output_names())
    if not args.no_check:
        report['check'] = check_export(graph, out, batch=max(args.batches))
    print(json.dumps(report))


def main(argv=None):
    args = parse_args(argv)
    if args.whole:
        return export_whole(args)
    from inline_mm.deploy.backbone import check_onnx, export_onnx, time_onnx_vs_eager
    model, tag = build_backbone(args)
    h, w = args.size
    out = args.out or f'{tag}_{h}x{w}.onnx'
    export_onnx(model, out, (h, w), opset=args.opset)
    report = dict(onnx=out, size=[h, w], opset=args.opset, outputs=list(model.out_channels))
    if not args.no_check:
        errors = check_onnx(out, model, (h, w), batches=args.batches)
        report['max_abs_err'] = {str(b): e for b, e in errors.items()}
    if args.bench:
        if args.threads:
            import torch
            torch.set_num_threads(args.threads)
        report['median_s'] = time_onnx_vs_eager(out, model, (h, w), threads=args.threads)
    print(json.dumps(report))
    if not args.no_check and max(report['max_abs_err'].values()) > args.atol:
        raise SystemExit(f'error: ONNX Runtime differs from PyTorch by more than {args.atol}')


if __name__ == '__main__':
    main()
