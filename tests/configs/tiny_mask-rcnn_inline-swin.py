# Body of a test config on the shipped Mask R-CNN + InLine-Swin config shrunk by
# support.shrink_detector (16-128 channels, one block per stage), written by
# reliability_support.tiny_config: it trains on 96x96 toy COCO images, iteration-based, with
# gradient checkpointing and a frozen stem + first stage (what DDP must cope with). Set
# train_dataloader.dataset.data_root with --cfg-options.
size = (96, 96)
classes = ('circle', 'triangle', 'rectangle')
model = dict(
    backbone=dict(drop_path_rate=0., with_cp=True, frozen_stages=1),
    roi_head=dict(bbox_head=dict(num_classes=len(classes)),
                  mask_head=dict(num_classes=len(classes))))
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='Resize', scale=size, keep_ratio=True),
    dict(type='PackDetInputs'),
]
train_dataloader = dict(
    batch_size=2, num_workers=0, persistent_workers=False,
    sampler=dict(type='InfiniteSampler', shuffle=False),
    batch_sampler=None,
    dataset=dict(data_root='data/toy_coco/', metainfo=dict(classes=classes),
                 pipeline=train_pipeline))
# training only: no validation or test loop
val_dataloader = val_cfg = val_evaluator = None
test_dataloader = test_cfg = test_evaluator = None
train_cfg = dict(_delete_=True, type='IterBasedTrainLoop', max_iters=3, val_interval=1000)
param_scheduler = [dict(type='ConstantLR', factor=1.0, by_epoch=False, begin=0, end=1000)]
optim_wrapper = dict(optimizer=dict(lr=1e-4))
default_hooks = dict(
    logger=dict(type='LoggerHook', interval=1),
    checkpoint=dict(type='CheckpointHook', by_epoch=False, interval=3))
log_processor = dict(by_epoch=False, window_size=1)
randomness = dict(seed=0)
