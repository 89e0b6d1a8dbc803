# Fine-tune UperNet + InLine-Swin-T (ImageNet-1k weights) on your own images and masks.
# Walkthrough: docs/own_data.md. Layout (names pair up by stem):
#
#   <data_root>/meta.json                  {"classes": [...], "palette": [[r, g, b], ...]}
#   <data_root>/images/{train,val}/*.jpg   (or .png .jpeg .bmp .tif .webp, mixed is fine)
#   <data_root>/masks/{train,val}/*.png    one class index per pixel (8-bit grey or
#                                          palette PNG; colour masks:
#                                          tools/dataset_converters/convert_masks.py)
#
# Check the data first:  python tools/misc/check_dataset.py --config <this file>
# Train:                 python tools/train.py <this file>
# This file inherits only packaged mmseg bases, so a copy of it works from any folder.
_base_ = [
    'mmseg::_base_/models/upernet_swin.py',
    'mmseg::_base_/default_runtime.py',
]
# inline_mm registers the backbones; inline_mm.engine.enable switches on its training fixes
# for mmengine (CPU DDP, checkpoint pruning and resume fallback) under any launcher.
custom_imports = dict(imports=['inline_mm', 'inline_mm.engine.enable'],
                      allow_failed_imports=False)

# ================================ your dataset: edit here ================================
data_root = 'data/my_dataset'
# Class names in label order: mask value i is classes[i]. Must equal "classes" in
# <data_root>/meta.json (the dataset refuses a mismatch instead of training on it).
classes = ('background', 'circle', 'triangle', 'rectangle')
num_classes = len(classes)    # the decode head, auxiliary head and metric all use this
# Label conventions:
# - reduce_zero_label=False (usual): value 0 is a real class (e.g. 'background').
# - reduce_zero_label=True: value 0 means "not labelled" and is ignored; value k is
#   classes[k - 1] (the ADE20K convention; `classes` then starts at value 1). mmseg does it
#   by turning 0 into 255, so ignore_index must then stay 255.
# - ignore_index: pixels with this value (borders, unlabelled areas) are neither trained on
#   nor scored. 255 by default; keep it outside 0..num_classes-1. A 2-class mask saved as
#   0/255 would thus ignore its foreground: check_dataset.py reports it, convert_masks.py
#   fixes it.
reduce_zero_label = False
ignore_index = 255
# Backbone weights: the official ImageNet-1k file (short names: checkpoints/README.md),
# downloaded once into the weights cache; or a local path.
# None starts from random weights: for rehearsing on the toy set without a download
# (real data needs the ImageNet weights).
pretrained = 'inline://swin_t'
# ==========================================================================================

# Training size and length. Images are resized to fit within img_scale (long x short
# side), randomly rescaled by 0.5-2x, and cropped to crop_size. batch_size is per GPU and
# must be >= 2: the heads use batch norm, and pooled 1x1 maps of one image cannot be
# normalised. The learning rate is the ADE20K one (16 images per step); it works for
# fine-tuning at 4-16 images per step. Change these here rather than with --cfg-options:
# the warm-up, the poly schedule, the log and checkpoint intervals are derived from them,
# so a short run (max_iters=100) warms up over 10 iterations and then decays to 0.
crop_size = (512, 512)
img_scale = (2048, 512)
batch_size = 4
max_iters = 20000
val_interval = 2000
lr = 6e-5
# Linear warm-up over 10% of the run (at most 1500 iterations). mmengine's LinearLR reaches
# the full lr at iteration warmup_iters - 1, so it needs >= 2 iterations to ramp at all:
# with 1 it would stay at lr * 1e-6 and the poly decay would continue from there.
warmup_iters = min(1500, max(2, max_iters // 10))
log_interval = min(50, max(1, max_iters // 20))

data_preprocessor = dict(size=crop_size, seg_pad_val=ignore_index)
model = dict(
    data_preprocessor=data_preprocessor,
    backbone=dict(
        _delete_=True,
        type='InLineSwin',
        arch='tiny',
        drop_path_rate=0.3,
        out_indices=(0, 1, 2, 3),
        # To start from a model trained on ADE20K instead, also set
        # load_from = '<that checkpoint>': the class layers of the heads differ in shape
        # and are skipped (with a warning).
        init_cfg=dict(type='Pretrained', checkpoint=pretrained) if pretrained else None),
    decode_head=dict(in_channels=[96, 192, 384, 768], num_classes=num_classes,
                     ignore_index=ignore_index),
    auxiliary_head=dict(in_channels=384, num_classes=num_classes,
                        ignore_index=ignore_index))

# Checks that stop at the first bad sample, naming its files (inline_mm.engine.transforms):
# CheckSegMapSize refuses an image/mask pair of different sizes (mmseg would stretch the
# mask over its image, silently); CheckSegLabels a mask value that is neither a class nor
# ignore_index (mmseg trains on it until the loss fails with "Target N is out of bounds",
# naming no file); CheckImageSize an image the test resize leaves below the backbone's
# stride. The mask checks step aside where no mask is read (MMSegInferencer).
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations'),     # reduce_zero_label comes from the dataset
    dict(type='CheckSegMapSize'),
    dict(type='CheckSegLabels', num_classes=num_classes, ignore_index=ignore_index),
    dict(type='RandomResize', scale=img_scale, ratio_range=(0.5, 2.0), keep_ratio=True),
    dict(type='RandomCrop', crop_size=crop_size, cat_max_ratio=0.75,
         ignore_index=ignore_index),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PhotoMetricDistortion'),
    dict(type='PackSegInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=img_scale, keep_ratio=True),
    dict(type='CheckImageSize'),
    dict(type='LoadAnnotations'),     # after Resize: scores are computed at full size
    dict(type='CheckSegMapSize'),
    dict(type='CheckSegLabels', num_classes=num_classes, ignore_index=ignore_index),
    dict(type='PackSegInputs'),
]
# Data loading processes: 4, or fewer on a machine with fewer CPUs. (A config with _base_
# cannot hold import statements, hence __import__.)
num_workers = min(4, __import__('os').cpu_count() or 1)
train_dataloader = dict(
    batch_size=batch_size,
    num_workers=num_workers,
    persistent_workers=True,
    sampler=dict(type='InfiniteSampler', shuffle=True),
    dataset=dict(
        type='SegFolderDataset',
        data_root=data_root,
        data_prefix=dict(img_path='images/train', seg_map_path='masks/train'),
        metainfo=dict(classes=classes),
        reduce_zero_label=reduce_zero_label,
        ignore_index=ignore_index,
        pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=1,
    num_workers=min(2, num_workers),
    persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(
        type='SegFolderDataset',
        data_root=data_root,
        data_prefix=dict(img_path='images/val', seg_map_path='masks/val'),
        metainfo=dict(classes=classes),
        reduce_zero_label=reduce_zero_label,
        ignore_index=ignore_index,
        pipeline=test_pipeline))
test_dataloader = val_dataloader
# Before iteration 1, decode every image and mask of the train and val sets and refuse, naming
# each, files that would stop training when a data worker reaches them (truncated, corrupt,
# missing, mis-sized masks). About 4 ms per 683x512 image/mask pair on one core: seconds for
# a few thousand pairs. decode=False reads only the headers; remove the line to skip the check.
custom_hooks = [dict(type='DatasetCheckHook')]
# mIoU like mmseg's IoUMetric; `tools/test.py ... --out DIR` also saves every prediction
# as DIR/<image stem>.png: class indices in a palette PNG coloured from meta.json.
val_evaluator = dict(type='PaletteIoUMetric', iou_metrics=['mIoU'], ignore_index=ignore_index)
test_evaluator = val_evaluator

optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=lr, betas=(0.9, 0.999), weight_decay=0.01),
    # No decay on LayerNorm gains/biases and on the relative position bias tables: they
    # set scales, offsets and positional preferences rather than capacity (Swin recipe).
    paramwise_cfg=dict(custom_keys={
        'norm': dict(decay_mult=0.),
        'relative_position_bias_table': dict(decay_mult=0.),
    }))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=warmup_iters),
    dict(type='PolyLR', eta_min=0.0, power=1.0, begin=warmup_iters,
         end=max(max_iters, warmup_iters + 1), by_epoch=False),
]
train_cfg = dict(type='IterBasedTrainLoop', max_iters=max_iters, val_interval=val_interval)
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')
default_hooks = dict(
    timer=dict(type='IterTimerHook'),
    logger=dict(type='LoggerHook', interval=log_interval, log_metric_by_epoch=False),
    param_scheduler=dict(type='ParamSchedulerHook'),
    # Keeps the last 2 checkpoints and the best one by val mIoU (best_mIoU_iter_*.pth).
    checkpoint=dict(type='CheckpointHook', by_epoch=False, interval=val_interval,
                    max_keep_ckpts=2, save_best='mIoU'),
    sampler_seed=dict(type='DistSamplerSeedHook'),
    visualization=dict(type='SegVisualizationHook'))
# Seeded: the same command on the same machine trains the same model (another machine,
# thread count or GPU may sum floats in another order and end with slightly other figures).
randomness = dict(seed=0)
