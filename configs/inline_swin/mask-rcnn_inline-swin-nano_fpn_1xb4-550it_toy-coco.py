# The README demo (`make demo`): a narrow InLine-Swin Mask R-CNN trained from scratch on
# the toy shapes dataset in minutes on a CPU. Make the data first:
#   python tools/misc/make_toy_dataset.py coco data/toy_coco
# then `python tools/train.py <this config>` (or `make demo`, which also evaluates and
# draws the predictions). Same layer types as InLine-Swin-T, everything much narrower.
_base_ = './mask-rcnn_inline-swin-t_fpn_1x_coco.py'

data_root = 'data/toy_coco/'
metainfo = dict(classes=('circle', 'triangle', 'rectangle'))
num_classes = 3
width = 64  # FPN / RoI feature channels (256 in the COCO configs)

# The pyramid starts at stride 8 (P3-P7, not P2-P6): the shapes are 20-130 px in 256 px
# images, and the stride-4 level's convolutions were a quarter of a CPU step.
strides = [8, 16, 32, 64]
model = dict(
    backbone=dict(embed_dims=32, depths=(1, 1, 2, 1), num_heads=(1, 2, 4, 8),
                  drop_path_rate=0.1, out_indices=(1, 2, 3), init_cfg=None),
    neck=dict(in_channels=[64, 128, 256], out_channels=width, num_outs=5),
    rpn_head=dict(in_channels=width, feat_channels=width,
                  anchor_generator=dict(strides=strides + [128])),
    # RoIAlign's backward and the mask head's convolutions on every positive RoI lead a CPU
    # step once the RPN has learnt: one sample per bin (not adaptively many on large RoIs),
    # two 32-wide mask convolutions (not four 64-wide), fewer RoIs; plenty for images with
    # at most 4 objects.
    roi_head=dict(
        bbox_roi_extractor=dict(out_channels=width, roi_layer=dict(sampling_ratio=1),
                                featmap_strides=strides),
        bbox_head=dict(in_channels=width, fc_out_channels=128, num_classes=num_classes),
        mask_roi_extractor=dict(out_channels=width, roi_layer=dict(sampling_ratio=1),
                                featmap_strides=strides),
        mask_head=dict(in_channels=width, num_convs=2, conv_out_channels=32,
                       num_classes=num_classes)),
    train_cfg=dict(rpn_proposal=dict(nms_pre=1000, max_per_img=300),
                   rcnn=dict(sampler=dict(num=128))),
    test_cfg=dict(rpn=dict(nms_pre=500, max_per_img=300)))

size = (256, 256)
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
# Iteration-based: an endless sampler (mmengine pauses 2 s each time a finite one ends).
train_dataloader = dict(
    batch_size=4, num_workers=1, sampler=dict(type='InfiniteSampler', shuffle=True),
    dataset=dict(data_root=data_root, metainfo=metainfo, pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=4, num_workers=1,
    dataset=dict(data_root=data_root, metainfo=metainfo, pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file=data_root + 'annotations/instances_val2017.json')
test_evaluator = val_evaluator

max_iters = 550
train_cfg = dict(_delete_=True, type='IterBasedTrainLoop', max_iters=max_iters,
                 val_interval=max_iters)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=50),
    dict(type='MultiStepLR', by_epoch=False, begin=0, end=max_iters,
         milestones=[410, 505], gamma=0.1),
]
# From scratch (no ImageNet weights to preserve): 5x the COCO fine-tuning lr.
optim_wrapper = dict(optimizer=dict(lr=5e-4))

default_hooks = dict(
    logger=dict(type='LoggerHook', interval=20),
    checkpoint=dict(type='CheckpointHook', by_epoch=False, interval=max_iters,
                    max_keep_ckpts=1))
log_processor = dict(by_epoch=False, window_size=20)
randomness = dict(seed=0)
