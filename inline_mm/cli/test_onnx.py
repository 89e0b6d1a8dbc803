"""Evaluate an exported detector or segmentor (``export_onnx.py --whole``) on its config's
test set with ONNX Runtime, as ``tools/test.py`` evaluates the PyTorch model.

    inline-mm-test-onnx CONFIG model.onnx                        # ONNX Runtime's metrics
    inline-mm-test-onnx CONFIG model.onnx --checkpoint model.pth # and PyTorch's, compared
    inline-mm-test-onnx CONFIG model.onnx --runtime openvino --precision bf16   # OpenVINO's

Prints one JSON line: ``onnxruntime`` (or ``openvino``: the config's test metrics: COCO box /
mask AP, mIoU),
and with ``--checkpoint`` ``pytorch`` (the same metrics from ``model.test_step`` on the
same batches) and ``parity`` (detections matched by label and IoU, the worst box and score
difference and the lowest mask IoU of a matched pair; or the share of pixels whose class
agrees). ``--fail-above`` turns the comparison into a check (exit status 1).
"""
import argparse
import json
import sys


def parse_args(argv=None):
    from mmengine.config import DictAction
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('config', help='the mmdet/mmseg config the file was exported from')
    p.add_argument('onnx', help='the .onnx file (tools/deployment/export_onnx.py --whole)')
    p.add_argument('--checkpoint', help='the PyTorch checkpoint: evaluate it too and compare')
    p.add_argument('--threads', type=int, default=None, help="the runtime's intra-op threads")
    p.add_argument('--runtime', choices=['onnxruntime', 'openvino'], default='onnxruntime',
                   help='run the file in ONNX Runtime (default) or OpenVINO (the openvino '
                        'extra); the report names it')
    p.add_argument('--precision', choices=['f32', 'bf16', 'f16'], default=None,
                   help="with --runtime openvino: its INFERENCE_PRECISION_HINT (default f32)")
    p.add_argument('--cfg-options', nargs='+', action=DictAction, default={},
                   metavar='KEY=VALUE',
                   help="override config settings, as tools/test.py's --cfg-options")
    p.add_argument('--fail-above', type=float, default=None, metavar='DIFF',
                   help='with --checkpoint: exit 1 if a metric differs by more than DIFF, or a '
                        'detection is unmatched')
    p.add_argument('--out', help='also write the report to this JSON file')
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    from inline_mm.deploy import NotExportable, evaluate
    try:
        report = evaluate(args.config, args.onnx, checkpoint=args.checkpoint,
                          threads=args.threads, cfg_options=args.cfg_options,
                          runtime=args.runtime, precision=args.precision)
    except (NotExportable, ValueError, FileNotFoundError, ImportError) as e:
        raise SystemExit(f'error: {e}')
    line = json.dumps(report, default=float)
    print(line)
    if args.out:
        with open(args.out, 'w') as f:
            f.write(line + '\n')
    if args.fail_above is not None and report['pytorch'] is not None:
        worst = max(abs(v - report['pytorch'][k]) for k, v in report[args.runtime].items()
                    if isinstance(v, (int, float)))
        unmatched = len(report['parity'].get('unmatched', []))
        if worst > args.fail_above or unmatched:
            print(f'error: {args.runtime} and PyTorch differ: largest metric difference '
                  f'{worst}, {unmatched} unmatched detections', file=sys.stderr)
            return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
