# Mask R-CNN with an InLine-DeiT-T backbone on COCO, 1x schedule (12 epochs). The plain
# backbone gives one stride-16 map (block 12 through the released final norm); ViTDet's
# simple feature pyramid (SimpleFPN with channel LayerNorms, registered by inline_mm)
# makes strides 4, 8, 16, 32 from it, and 64 by subsampling for the RPN. Recipe of the
# project's other Mask R-CNN configs: AdamW lr 1e-4, wd 0.05, 16 images per step
# (8 GPUs x 2), steps at epochs 8 and 11. Every other InLine-DeiT Mask R-CNN config is a
# short child of this file.
_base_ = [
    'mmdet::_base_/models/mask-rcnn_r50_fpn.py',
    'mmdet::_base_/datasets/coco_instance.py',
    'mmdet::_base_/schedules/schedule_1x.py',
    'mmdet::_base_/default_runtime.py',
]
custom_imports = dict(imports=['inline_mm'], allow_failed_imports=False)

width = 192
model = dict(
    backbone=dict(
        _delete_=True,
        type='InLineDeiT',
        arch='tiny',
        drop_path_rate=0.1,
        out_indices=(11,),
        final_norm=True,
        with_cp=False,
        # Official ImageNet weights, file name as in checkpoints/README.md.
        init_cfg=dict(type='Pretrained', checkpoint='checkpoints/inline_deit_t.pth')),
    neck=dict(
        _delete_=True,
        type='SimpleFPN',
        in_channels=width,
        out_channels=256,
        scales=(4, 2, 1, 0.5),
        num_outs=5,
        norm_cfg=dict(type='LN2d', eps=1e-6)))

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
    # No decay on LayerNorms (the backbone's and the pyramid's), the position table and
    # the class token: they set scales, offsets and positions rather than capacity, and
    # decay would only erode what ImageNet taught them.
    paramwise_cfg=dict(custom_keys={
        'norm': dict(decay_mult=0.),
        'pos_embed': dict(decay_mult=0.),
        'cls_token': dict(decay_mult=0.),
    }))
