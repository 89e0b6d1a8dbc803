# Fine-tune Mask R-CNN + InLine-Swin-T (ImageNet-1k weights) on your own instance masks.
# Walkthrough: docs/own_instances.md. Layout (a COCO export; labelme folders:
# tools/dataset_converters/labelme2coco.py):
#
#   DATA/annotations/train.json   COCO instances: "images", "annotations" (polygon or RLE
#   DATA/annotations/val.json     masks), "categories" (any ids, e.g. 3, 7, 12)
#   DATA/images/...               file_name in the json is relative to images/
#
# DATA comes from one place: the environment variable INLINE_MM_DATA (default data/my_coco),
# read when the config is parsed, so every path below and the class names follow it:
#   INLINE_MM_DATA=/data/parts python tools/train.py <this file>
# (or edit the default here). `--cfg-options data_root=...` would NOT move the paths derived
# from it: they are computed when the file is parsed, before --cfg-options apply.
#
# Check the data first:  python tools/misc/check_dataset.py DATA/annotations/train.json
# Train:                 python tools/train.py <this file>     (tools/dist_train.sh, mim train)
# This file inherits only packaged mmdet bases, so a copy of it works from any folder.
_base_ = [
    'mmdet::_base_/models/mask-rcnn_r50_fpn.py',
    'mmdet::_base_/default_runtime.py',
]
# inline_mm registers the backbones; inline_mm.engine.enable switches on its training fixes
# for mmengine (CPU DDP, checkpoint pruning and resume fallback) under any launcher.
custom_imports = dict(imports=['inline_mm', 'inline_mm.engine.enable'],
                      allow_failed_imports=False)

# ================================ your dataset: edit here ================================
data_root = '{{$INLINE_MM_DATA:data/my_coco}}/'
train_ann_file = 'annotations/train.json'
val_ann_file = 'annotations/val.json'
img_prefix = 'images/'
# The class names, read from train.json when this file is parsed (never typed by hand): class
# i is the i-th entry of its "categories" list, the numbering mmdet's CocoDataset and
# CocoMetric give the categories; their ids may be anything. num_classes follows, and with
# it the box and mask heads below; the datasets and the evaluator get the names through
# metainfo. val.json must list the same categories in the same order (the checks refuse
# otherwise). (A config with _base_ cannot hold import statements, hence __import__.)
classes = __import__('inline_mm.datasets.coco_checks', fromlist=['_']).coco_classes(
    data_root + train_ann_file)
num_classes = len(classes)
# Backbone weights: the official ImageNet-1k file (short names: checkpoints/README.md),
# downloaded once into the weights cache; or a local path. None starts from random weights
# (for a rehearsal on the toy set without a download; real data needs the ImageNet weights).
pretrained = 'inline://swin_t'
# ==========================================================================================

# Size and length for a few hundred images on one GPU: the short side drawn from 480-800
# pixels (long side at most 1333), tested at 800; 4 images a step; 36 epochs (a few thousand
# iterations), scored every 3. The lr is the COCO recipe's AdamW 1e-4. Change these here,
# not with --cfg-options: the warm-up, the decay steps and the intervals derive from them.
img_scale = (1333, 800)
train_short_sides = (480, 512, 544, 576, 608, 640, 672, 704, 736, 768, 800)
batch_size = 4
max_epochs = 36
val_interval = 3
lr = 1e-4
warmup_iters = 500
# Images without annotations: mmdet's training skips them (True). False trains on them
# as pure background (fewer false positives on such scenes). Validation scores them always.
filter_empty_gt = True
num_workers = min(4, __import__('os').cpu_count() or 1)

model = dict(
    backbone=dict(
        _delete_=True,
        type='InLineSwin',
        arch='tiny',
        drop_path_rate=0.1,  # the COCO configs' Swin-T rate (the lab's Swin-T detectors)
        out_indices=(0, 1, 2, 3),
        init_cfg=dict(type='Pretrained', checkpoint=pretrained) if pretrained else None),
    neck=dict(in_channels=[96, 192, 384, 768]),
    # Proposals for an image come only from anchors on its own pixels, not from the
    # padding that batching adds next to a smaller image.
    rpn_head=dict(type='PadAwareRPNHead'),
    roi_head=dict(bbox_head=dict(num_classes=num_classes),
                  mask_head=dict(num_classes=num_classes)))

metainfo = dict(classes=classes)
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='RandomChoiceResize', scales=[(img_scale[0], s) for s in train_short_sides],
         keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=img_scale, keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='PackDetInputs',
         meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor')),
]
train_dataloader = dict(
    batch_size=batch_size,
    num_workers=num_workers,
    persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=True),
    batch_sampler=dict(type='AspectRatioBatchSampler'),
    dataset=dict(
        type='CocoDataset',
        data_root=data_root,
        ann_file=train_ann_file,
        data_prefix=dict(img=img_prefix),
        metainfo=metainfo,
        filter_cfg=dict(filter_empty_gt=filter_empty_gt, min_size=32),
        pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=1,
    num_workers=min(2, num_workers),
    persistent_workers=True,
    drop_last=False,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(
        type='CocoDataset',
        data_root=data_root,
        ann_file=val_ann_file,
        data_prefix=dict(img=img_prefix),
        metainfo=metainfo,
        test_mode=True,
        pipeline=test_pipeline))
test_dataloader = val_dataloader
# COCO box and mask mAP (pycocotools), per class too; the category ids are the file's.
val_evaluator = dict(type='CocoMetric', ann_file=data_root + val_ann_file,
                     metric=['bbox', 'segm'], classwise=True)
test_evaluator = val_evaluator
# Before epoch 1: the checks of tools/misc/check_dataset.py on train.json and val.json
# (schema, ids, categories, polygons, RLE sizes, boxes, json sizes against the decoded
# images with their EXIF orientation, masks present for Mask R-CNN) and a full decode of
# every image; one error lists every problem. decode=False reads only image headers.
custom_hooks = [dict(type='DatasetCheckHook')]

optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=lr, betas=(0.9, 0.999), weight_decay=0.05),
    # No decay on LayerNorm gains/biases and the relative position bias tables: they set
    # scales, offsets and positional preferences rather than capacity (Swin recipe).
    paramwise_cfg=dict(custom_keys={
        'norm': dict(decay_mult=0.),
        'relative_position_bias_table': dict(decay_mult=0.),
    }))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=warmup_iters),
    # lr / 10 at 2/3 and again at 11/12 of the run (the 1x schedule's 8 and 11 of 12).
    dict(type='MultiStepLR', begin=0, end=max_epochs, by_epoch=True, gamma=0.1,
         milestones=[max(1, max_epochs * 2 // 3), max(1, max_epochs * 11 // 12)]),
]
train_cfg = dict(type='EpochBasedTrainLoop', max_epochs=max_epochs, val_interval=val_interval)
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')
default_hooks = dict(
    # Keeps the last 2 checkpoints and the best one by val mask mAP
    # (best_coco_segm_mAP_epoch_N.pth).
    checkpoint=dict(type='CheckpointHook', interval=val_interval, max_keep_ckpts=2,
                    save_best='coco/segm_mAP', rule='greater'),
    logger=dict(type='LoggerHook', interval=20))
# Seeded: the same command on the same machine trains the same model.
randomness = dict(seed=0)
