"""What computing low precision in fp32 costs in a bf16 Mask R-CNN predict (issue 61).

    python -m benchmarks.amp_fallbacks                    # InLine-Swin-T Mask R-CNN, 800x1344
    python -m benchmarks.amp_fallbacks --size 512 640 --rounds 2

The shipped ``mask-rcnn_inline-swin-t_fpn_1x_coco.py`` (random weights, its box classifier
biased towards one class so that, as with a trained model, the shipped score threshold keeps
boxes and the mask branch runs on its 100 detections) predicts one image
under ``torch.autocast('cpu', dtype=torch.bfloat16)`` through ``model.test_step``, as
``tools/test.py --cfg-options test_cfg.fp16=True`` runs it, in ``--rounds`` profiled rounds
after one warm-up, each function below inside a ``torch.profiler.record_function`` range
(the benchmark wraps them for the run; the product code carries no labels):

- ``widening``: the casts to fp32 that the stand-in of mmcv's ops adds for low precision
  (``inline_mm/patches/mmcv_ext.py``, ``_compute``) and the patch row ``mmcv_ops_bf16``
  (``inline_mm/patches/mmcv_bf16.py``, on with compiled mmcv only);
- ``to fp32``: the conversion of the predictions (the patch row ``fp32_predictions``,
  ``inline_mm/patches/predictions.py``);
- ``RPN in fp32``: ``PadAwareRPNHead``'s objectness and box deltas, computed in fp32 under
  autocast (``inline_mm/models/detection/pad_aware_rpn.py``, ``outputs_in_fp32``): the cast
  of its features and its two 1x1 convolutions, which would run in bf16 otherwise;
- ``RoIAlign``, ``NMS``: everything the stand-in's ``roi_align_forward`` and ``nms`` run, in
  fp32 (the widening above included): an upper bound of what computing in fp32 costs, since
  both ran in fp32 under autocast before too (torchvision's autocast rule for RoIAlign; the
  stand-in's NMS took fp32 boxes).

Each is printed as a share of the predict's profiled time, with the predict's median wall
time unprofiled.
"""
import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / 'configs/inline_swin/mask-rcnn_inline-swin-t_fpn_1x_coco.py'
#: category -> the functions (module, name) whose calls it is; the outermost call counts
CATEGORIES = {
    'widening': (('mmcv._ext', '_compute'), ('inline_mm.patches.mmcv_bf16', '_widened')),
    'to fp32': (('inline_mm.patches.predictions', 'to_fp32'),),
    'RPN in fp32': (('inline_mm.models.detection.pad_aware_rpn', 'outputs_in_fp32'),),
    'RoIAlign': (('mmcv._ext', 'roi_align_forward'),),
    'NMS': (('mmcv._ext', 'nms'),),
}


def build(size):
    from mmdet.registry import MODELS
    from mmdet.structures import DetDataSample
    from mmengine.config import Config
    from mmengine.registry import DefaultScope

    import inline_mm.engine
    inline_mm.engine.install()
    cfg = Config.fromfile(str(CONFIG))
    cfg.model.backbone.init_cfg = None
    with DefaultScope.overwrite_default_scope('mmdet'):
        model = MODELS.build(cfg.model)
    model.init_weights()
    with torch.no_grad():       # confident in one class, as a trained model is in a few
        model.roi_head.bbox_head.fc_cls.bias[0] = 8.
    model.eval()
    h, w = size
    sample = DetDataSample(metainfo=dict(img_shape=(h, w), ori_shape=(h, w), pad_shape=(h, w),
                                         scale_factor=(1., 1.), batch_input_shape=(h, w)))
    image = torch.randint(0, 256, (3, h, w), dtype=torch.uint8,
                          generator=torch.Generator().manual_seed(0))
    return model, dict(inputs=[image], data_samples=[sample])


def predict(model, data):
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16):
        out = model.test_step(data)
    assert out[0].pred_instances.bboxes.dtype == torch.float32
    return out


@contextlib.contextmanager
def labelled():
    """Each function of :data:`CATEGORIES` (those of modules this process has) runs inside a
    ``torch.profiler.record_function`` range named after its category, its outermost call
    only; the functions are restored on exit."""
    from torch.profiler import record_function
    depth, saved = dict.fromkeys(CATEGORIES, 0), []

    def wrap(category, fn):
        def call(*args, **kwargs):
            depth[category] += 1
            try:
                if depth[category] > 1:
                    return fn(*args, **kwargs)
                with record_function(category):
                    return fn(*args, **kwargs)
            finally:
                depth[category] -= 1
        return call
    for category, functions in CATEGORIES.items():
        for module_name, name in functions:
            module = sys.modules.get(module_name)
            if module is not None and hasattr(module, name):
                saved.append((module, name, getattr(module, name)))
                setattr(module, name, wrap(category, getattr(module, name)))
    try:
        yield
    finally:
        for module, name, fn in reversed(saved):
            setattr(module, name, fn)


def shares(model, data, rounds: int) -> dict:
    """Each category's CPU time as a share of the predicts', profiled."""
    from torch.profiler import ProfilerActivity, profile, record_function
    with labelled(), profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(rounds):
            with record_function('predict'):
                predict(model, data)
    times = {e.key: e.cpu_time_total for e in prof.key_averages()}
    total = times['predict']
    return {name: times.get(name, 0.) / total for name in CATEGORIES} | {
        'predict_ms': total / 1e3 / rounds}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--size', type=int, nargs=2, default=(800, 1344), metavar=('H', 'W'))
    parser.add_argument('--rounds', type=int, default=3)
    args = parser.parse_args(argv)
    import _inline_mm_mmcv_hook
    model, data = build(tuple(args.size))
    out = predict(model, data)                                   # warm-up
    walls = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        predict(model, data)
        walls.append(time.perf_counter() - start)
    result = shares(model, data, args.rounds)
    print(f'Mask R-CNN InLine-Swin-T predict, bf16 autocast, {args.size[0]}x{args.size[1]}, '
          f'{len(out[0].pred_instances)} detections; torch {torch.__version__}, '
          f'{torch.get_num_threads()} threads, mmcv._ext: {_inline_mm_mmcv_hook.backend()}')
    print(f'wall {statistics.median(walls):.2f} s unprofiled (median of {args.rounds}), '
          f'{result["predict_ms"] / 1e3:.2f} s profiled')
    for name in CATEGORIES:
        print(f'{name:>13}: {100 * result[name]:.2f}% of the predict')
    return result


if __name__ == '__main__':
    main()
