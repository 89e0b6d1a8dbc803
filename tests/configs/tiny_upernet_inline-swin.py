# Body of a test config: appended to `_base_ = ['<a shipped UperNet + InLine-Swin config>']`
# by tests/test_reliability_*.py, it shrinks the model to CPU-test size (16-96 channels,
# one block per stage) and trains on 64x64 toy ADE images without augmentation or
# dropout, so that runs can be compared number for number. Everything else (SyncBN heads,
# optimizer type, paramwise settings, runtime) stays as shipped. Set
# train_dataloader.dataset.data_root with --cfg-options.
size = (64, 64)
model = dict(
    data_preprocessor=dict(size=size),
    backbone=dict(embed_dims=16, depths=(1, 1, 1, 1), num_heads=(1, 1, 2, 2),
                  drop_path_rate=0., init_cfg=None),
    decode_head=dict(in_channels=[16, 32, 64, 128], channels=16, dropout_ratio=0.),
    auxiliary_head=dict(in_channels=64, channels=8, dropout_ratio=0.))
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
val_dataloader = None
val_cfg = None
val_evaluator = None
test_dataloader = None
test_cfg = None
test_evaluator = None
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
