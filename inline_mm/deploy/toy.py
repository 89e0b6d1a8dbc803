"""Small models that detect and segment, trained in about a minute on a CPU: to check an
export end to end (the metrics and the detections of ONNX Runtime against PyTorch) where
no trained model of real size is at hand (tests, the GPU check of TensorRT).

Each is a narrow InLine-Swin (16 channels, one block per stage) with its head, trained
from scratch on a toy set of 8 images of shapes (:mod:`inline_mm.datasets.toy`) until it has
learned them; its test split *is* those 8 images, so its metrics say that it detects
what it was shown (box / mask AP around 0.7 for Mask R-CNN), not that it generalises.

    from inline_mm.deploy.toy import train_toy
    config, checkpoint, metrics = train_toy('mask_rcnn', 'work_dirs/toy')
"""
import os
import os.path as osp
import time
from typing import Dict, Tuple

__all__ = ['TOY_KINDS', 'toy_config', 'make_toy_data', 'train_toy']

#: the toy models: kind -> (data kind, image side, training iterations)
TOY_KINDS = {'mask_rcnn': ('coco', 96, 200), 'retinanet': ('coco', 96, 200),
             'upernet': ('ade', 96, 120)}

_BACKBONE = """
backbone=dict(_delete_=True, type='InLineSwin', embed_dims=16, depths=(1, 1, 1, 1),
              num_heads=(1, 2, 4, 8), drop_path_rate=0., out_indices={out}, init_cfg=None)"""

_DETECTION = """
_base_ = ['mmdet::_base_/models/{model}.py', 'mmdet::_base_/default_runtime.py']
custom_imports = dict(imports=['inline_mm'], allow_failed_imports=False)
data_root = {root!r}
classes = ('circle', 'triangle', 'rectangle')
model = dict({backbone},
    {heads})
pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='Resize', scale=({size}, {size}), keep_ratio=True),
    dict(type='PackDetInputs', meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape',
                                          'scale_factor')),
]
dataset = dict(type='CocoDataset', data_root=data_root, metainfo=dict(classes=classes),
               ann_file='annotations/instances_train2017.json',
               data_prefix=dict(img='train2017/'), pipeline=pipeline)
train_dataloader = dict(batch_size=4, num_workers=0, persistent_workers=False,
                        sampler=dict(type='InfiniteSampler', shuffle=True),
                        dataset=dict(dataset, filter_cfg=dict(filter_empty_gt=True)))
val_dataloader = dict(batch_size=4, num_workers=0, persistent_workers=False, drop_last=False,
                      sampler=dict(type='DefaultSampler', shuffle=False), dataset=dataset)
test_dataloader = val_dataloader
val_evaluator = dict(type='CocoMetric', ann_file=data_root + 'annotations/instances_train2017.json',
                     metric={metric})
test_evaluator = val_evaluator
"""

_MASK_RCNN_HEADS = """neck=dict(in_channels=[16, 32, 64, 128], out_channels=32),
    rpn_head=dict(type='PadAwareRPNHead', in_channels=32, feat_channels=32),
    roi_head=dict(
        bbox_roi_extractor=dict(out_channels=32),
        bbox_head=dict(in_channels=32, fc_out_channels=64, num_classes=3),
        mask_roi_extractor=dict(out_channels=32),
        mask_head=dict(in_channels=32, conv_out_channels=32, num_convs=2, num_classes=3)),
    train_cfg=dict(rpn_proposal=dict(nms_pre=200, max_per_img=64),
                   rcnn=dict(sampler=dict(num=32))),
    test_cfg=dict(rpn=dict(nms_pre=200, max_per_img=64))"""

_RETINANET_HEADS = """neck=dict(in_channels=[32, 64, 128], out_channels=32, start_level=0,
              add_extra_convs='on_input'),
    bbox_head=dict(in_channels=32, feat_channels=32, stacked_convs=2, num_classes=3)"""

_SEGMENTATION = """
_base_ = ['mmseg::_base_/models/upernet_swin.py', 'mmseg::_base_/default_runtime.py']
custom_imports = dict(imports=['inline_mm'], allow_failed_imports=False)
data_root = {root!r}
norm_cfg = dict(type='BN', requires_grad=True)
model = dict(
    data_preprocessor=dict(size=None, size_divisor=32),  # images of 72-120 px, any ratio
    {backbone},
    decode_head=dict(in_channels=[16, 32, 64, 128], channels=32, num_classes=150,
                     norm_cfg=norm_cfg),
    auxiliary_head=None)
pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='PackSegInputs'),
]
dataset = dict(type='ADE20KDataset', data_root=data_root,
               data_prefix=dict(img_path='images/training', seg_map_path='annotations/training'),
               pipeline=pipeline)
train_dataloader = dict(batch_size=4, num_workers=0, persistent_workers=False,
                        sampler=dict(type='InfiniteSampler', shuffle=True), dataset=dataset)
val_dataloader = dict(batch_size=1, num_workers=0, persistent_workers=False,
                      sampler=dict(type='DefaultSampler', shuffle=False), dataset=dataset)
test_dataloader = val_dataloader
val_evaluator = dict(type='IoUMetric', iou_metrics=['mIoU'])
test_evaluator = val_evaluator
"""

_SCHEDULE = """
train_cfg = dict(type='IterBasedTrainLoop', max_iters={iters}, val_interval={iters})
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')
optim_wrapper = dict(type='OptimWrapper',
                     optimizer=dict(type='AdamW', lr=2e-3, weight_decay=0.05),
                     clip_grad=dict(max_norm=10.))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=20),
    dict(type='MultiStepLR', by_epoch=False, begin=0, end={iters},
         milestones=[{iters} * 4 // 5], gamma=0.1),
]
default_hooks = dict(logger=dict(type='LoggerHook', interval=40),
                     checkpoint=dict(type='CheckpointHook', by_epoch=False, interval={iters},
                                     max_keep_ckpts=1),
                     visualization=dict(type='{vis}VisualizationHook'))
log_processor = dict(by_epoch=False, window_size=20)
randomness = dict(seed=0, deterministic=False)
"""


def toy_config(kind: str, data_root: str, iters: int = None) -> str:
    """The config text of the toy model ``kind`` (:data:`TOY_KINDS`) on the toy set in
    ``data_root`` (:func:`make_toy_data`)."""
    if kind not in TOY_KINDS:
        raise ValueError(f'kind {kind!r}: choose among {", ".join(TOY_KINDS)}')
    _, size, default_iters = TOY_KINDS[kind]
    root = osp.join(osp.abspath(data_root), '')
    iters = iters or default_iters
    if kind == 'upernet':
        text = _SEGMENTATION.format(root=root, size=size,
                                    backbone=_BACKBONE.format(out=(0, 1, 2, 3)).strip())
        return text + _SCHEDULE.format(iters=iters, vis='Seg')
    heads = _MASK_RCNN_HEADS if kind == 'mask_rcnn' else _RETINANET_HEADS
    text = _DETECTION.format(
        model='mask-rcnn_r50_fpn' if kind == 'mask_rcnn' else 'retinanet_r50_fpn',
        root=root, size=size, heads=heads,
        backbone=_BACKBONE.format(out=(0, 1, 2, 3) if kind == 'mask_rcnn' else (1, 2, 3)).strip(),
        metric="['bbox', 'segm']" if kind == 'mask_rcnn' else "'bbox'")
    return text + _SCHEDULE.format(iters=iters, vis='Det')


def make_toy_data(kind: str, root: str) -> str:
    """Write the toy set of ``kind``'s data under ``root`` (8 training images of shapes;
    COCO layout, or ADE20K's); returns ``root``."""
    data, size, _ = TOY_KINDS[kind]
    if data == 'coco':
        from inline_mm.datasets.toy.coco import make_coco_toy
        make_coco_toy(root, num_train=8, num_val=1, size=size, max_objects=2, seed=3)
    else:
        from inline_mm.datasets.toy.segmentation import make_ade_toy
        make_ade_toy(root, num_train=8, num_val=1, size=size, seed=3)
    return root


def train_toy(kind: str, work_dir: str, iters: int = None) -> Tuple[str, str, Dict]:
    """Make the data, write the config, train the toy model ``kind`` with mmengine's
    ``Runner`` (in this process) and test it on its training images. Returns the config
    path, the checkpoint path and the test metrics."""
    from mmengine.runner import Runner

    from ..apis import read_config
    data = make_toy_data(kind, osp.join(work_dir, 'data'))
    config = osp.join(work_dir, f'toy_{kind}.py')
    with open(config, 'w') as f:
        f.write(toy_config(kind, data, iters))
    cfg = read_config(config)
    cfg.work_dir = osp.join(work_dir, 'run')
    # a name of its own: mmengine's message hub is shared by runners of one name
    cfg.experiment_name = f'toy_{kind}_{os.getpid()}_{time.time_ns()}'
    runner = Runner.from_cfg(cfg)
    runner.train()
    metrics = runner.test()
    checkpoint = osp.join(cfg.work_dir, f'iter_{cfg.train_cfg.max_iters}.pth')
    return config, checkpoint, metrics


#: each toy model's graph: wider than its images, so that every image is padded
TOY_GRAPH_SIZE = {'mask_rcnn': (96, 128), 'retinanet': (96, 128), 'upernet': (128, 128)}


def main(argv=None):
    """``python -m inline_mm.deploy.toy KIND WORK_DIR``: train the toy model, export it at
    :data:`TOY_GRAPH_SIZE` and print (one JSON line) its metrics in PyTorch and in ONNX
    Runtime with the comparison of the two (:func:`inline_mm.deploy.evaluate`)."""
    import argparse
    import json
    p = argparse.ArgumentParser(description=main.__doc__.split('\n\n')[0])
    p.add_argument('kind', choices=list(TOY_KINDS))
    p.add_argument('work_dir')
    args = p.parse_args(argv)
    from ..apis import init_model
    from . import build_graph, evaluate, export_graph
    config, checkpoint, _ = train_toy(args.kind, args.work_dir)
    model = init_model(config, checkpoint)
    path = export_graph(build_graph(model, TOY_GRAPH_SIZE[args.kind]),
                        osp.join(args.work_dir, f'toy_{args.kind}.onnx'))
    report = evaluate(model.cfg, path, model=model)
    print(json.dumps(dict(report, onnx=path, checkpoint=checkpoint), default=float))


if __name__ == '__main__':
    main()
