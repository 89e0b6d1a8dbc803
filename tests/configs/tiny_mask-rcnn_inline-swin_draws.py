# A child of the tiny Mask R-CNN test config (reliability_support.tiny_config, body
# tiny_mask-rcnn_inline-swin.py) with everything that draws random numbers on, as in the
# shipped recipe: drop-path, RandomFlip, a shuffled sampler, the RPN's and RoI head's
# RandomSamplers (shipped), and validation at every checkpoint. Data workers stay off: the
# flips draw in the training process. Set the data roots and val_evaluator.ann_file with
# --cfg-options.
model = dict(backbone=dict(drop_path_rate=0.1))
train_dataloader = dict(sampler=dict(shuffle=True), dataset=dict(pipeline=[
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='Resize', scale={{_base_.size}}, keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs')]))
val_dataloader = dict(
    _delete_=True, batch_size=2, num_workers=0,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(type='CocoDataset', ann_file='annotations/instances_val2017.json',
                 data_prefix=dict(img='val2017/'), test_mode=True,
                 metainfo={{_base_.train_dataloader.dataset.metainfo}}, pipeline=[
                     dict(type='LoadImageFromFile'),
                     dict(type='Resize', scale={{_base_.size}}, keep_ratio=True),
                     dict(type='PackDetInputs')]))
val_evaluator = dict(_delete_=True, type='CocoMetric', metric=['bbox', 'segm'])
val_cfg = dict(_delete_=True, type='ValLoop')
train_cfg = dict(max_iters=6, val_interval=3)
