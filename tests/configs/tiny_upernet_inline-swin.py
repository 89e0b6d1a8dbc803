# Body of a test config on the shipped UperNet + InLine-Swin config shrunk by
# support.shrink_segmentor (16-128 channels, one block per stage, 64x64 inputs), written by
# reliability_support.tiny_config: it trains on 64x64 toy ADE images without augmentation
# or dropout, so that runs can be compared number for number. Everything else (SyncBN heads,
# optimizer type, paramwise settings, runtime) stays as shipped. Set
# train_dataloader.dataset.data_root with --cfg-options.
size = (64, 64)
model = dict(
    backbone=dict(drop_path_rate=0.),
    decode_head=dict(dropout_ratio=0.),
    auxiliary_head=dict(dropout_ratio=0.))
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations'),
    dict(type='Resize', scale=size, keep_ratio=False),
    dict(type='PackSegInputs'),
]
train_dataloader = dict(
    batch_size=2, num_workers=0, persistent_workers=False,
    sampler=dict(type='InfiniteSampler', shuffle=False),
    dataset=dict(data_root='data/toy_ade', pipeline=train_pipeline))
# training only: no validation or test loop
val_dataloader = val_cfg = val_evaluator = None
test_dataloader = test_cfg = test_evaluator = None
optim_wrapper = dict(optimizer=dict(lr=1e-3))
max_iters = 6
# lr changes every iteration, so a resumed run shows whether the schedule was restored.
param_scheduler = [dict(type='PolyLR', eta_min=0., power=1.0, begin=0, end=12, by_epoch=False)]
train_cfg = dict(type='IterBasedTrainLoop', max_iters=max_iters, val_interval=1000)
default_hooks = dict(
    logger=dict(type='LoggerHook', interval=1, log_metric_by_epoch=False),
    checkpoint=dict(type='CheckpointHook', by_epoch=False, interval=2))
log_processor = dict(by_epoch=False, window_size=1)
randomness = dict(seed=0)
