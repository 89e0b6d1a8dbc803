# Body of a test config on the shipped Mask R-CNN + InLine-Swin config shrunk by
# support.shrink_detector, written by reliability_support.tiny_config: what
# tiny_mask-rcnn_inline-swin.py trains, with everything that draws random numbers on, as in
# the shipped recipe: drop-path, RandomFlip, a shuffled sampler, the RPN's and RoI head's
# RandomSamplers (shipped), and validation at every checkpoint (the shipped recipes validate
# at every save). Data workers stay off: the flips draw in the training process. Set
# train_dataloader.dataset.data_root, val_dataloader.dataset.data_root and
# val_evaluator.ann_file with --cfg-options.
size = (96, 96)
classes = ('circle', 'triangle', 'rectangle')
model = dict(
    backbone=dict(drop_path_rate=0.1),
    roi_head=dict(bbox_head=dict(num_classes=len(classes)),
                  mask_head=dict(num_classes=len(classes))))
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='Resize', scale=size, keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=size, keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='PackDetInputs',
         meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor')),
]
train_dataloader = dict(
    batch_size=2, num_workers=0, persistent_workers=False,
    sampler=dict(type='InfiniteSampler', shuffle=True),
    batch_sampler=None,
    dataset=dict(data_root='data/toy_coco/', metainfo=dict(classes=classes),
                 pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=2, num_workers=0, persistent_workers=False, drop_last=False,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(type='CocoDataset', data_root='data/toy_coco/',
                 ann_file='annotations/instances_val2017.json',
                 data_prefix=dict(img='val2017/'), test_mode=True,
                 metainfo=dict(classes=classes), pipeline=test_pipeline))
val_evaluator = dict(type='CocoMetric', ann_file='data/toy_coco/annotations/instances_val2017.json',
                     metric=['bbox', 'segm'], format_only=False)
val_cfg = dict(type='ValLoop')
test_dataloader = test_cfg = test_evaluator = None
train_cfg = dict(_delete_=True, type='IterBasedTrainLoop', max_iters=6, val_interval=3)
param_scheduler = [dict(type='ConstantLR', factor=1.0, by_epoch=False, begin=0, end=1000)]
optim_wrapper = dict(optimizer=dict(lr=1e-4))
default_hooks = dict(
    logger=dict(type='LoggerHook', interval=1),
    checkpoint=dict(type='CheckpointHook', by_epoch=False, interval=3))
log_processor = dict(by_epoch=False, window_size=1)
randomness = dict(seed=0)
