# Mask R-CNN + FPN with an InLine-Swin-T backbone on COCO, 1x schedule (12 epochs).
# Recipe of the InLine authors' sibling linear-attention detectors (Agent-Attention, MLLA):
# AdamW lr 1e-4, wd 0.05, 16 images per step (8 GPUs x 2), steps at epochs 8 and 11.
# Every other mask-rcnn_inline-* config is a short child of this file.
_base_ = [
    'mmdet::_base_/models/mask-rcnn_r50_fpn.py',
    'mmdet::_base_/datasets/coco_instance.py',
    'mmdet::_base_/schedules/schedule_1x.py',
    'mmdet::_base_/default_runtime.py',
]
custom_imports = dict(imports=['inline_mm'], allow_failed_imports=False)

model = dict(
    backbone=dict(
        _delete_=True,
        type='InLineSwin',
        arch='tiny',
        drop_path_rate=0.2,
        out_indices=(0, 1, 2, 3),
        with_cp=False,
        # Official ImageNet weights, file name as in checkpoints/README.md.
        init_cfg=dict(type='Pretrained', checkpoint='checkpoints/inline_swin_t.pth')),
    neck=dict(in_channels=[96, 192, 384, 768]))

max_epochs = 12
train_cfg = dict(max_epochs=max_epochs)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=1000),
    dict(type='MultiStepLR', begin=0, end=max_epochs, by_epoch=True, milestones=[8, 11],
         gamma=0.1),
]

optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(_delete_=True, type='AdamW', lr=1e-4, betas=(0.9, 0.999),
                   weight_decay=0.05),
    # No decay on LayerNorm gains/biases and the relative position bias tables: they
    # set scales, offsets and positional preferences rather than model capacity, and
    # decaying them toward zero only fights the normalisation (as in the Swin recipe).
    paramwise_cfg=dict(custom_keys={
        'norm': dict(decay_mult=0.),
        'relative_position_bias_table': dict(decay_mult=0.),
    }))
