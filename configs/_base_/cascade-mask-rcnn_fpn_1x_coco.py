# Cascade Mask R-CNN + FPN on COCO, 1x schedule (12 epochs): mmdet's own Cascade Mask R-CNN
# with the box heads of the Swin authors' cascades and of mmdet's ConvNeXt one
# (configs/convnext/cascade-mask-rcnn_convnext-*: four 3x3 convs with batch norm and one fc
# per stage, box targets decoded and scored by GIoU), trained as the Mask R-CNN
# configs train (./mask-rcnn_fpn_1x_coco.py: AdamW lr 1e-4, wd 0.05, 16 images per step,
# steps at epochs 8 and 11). A family's configs
# (configs/inline_<family>/cascade-mask-rcnn_*_coco.py) take the backbone, its neck widths
# and its no-decay keys from the same fragment as the Mask R-CNN configs
# (configs/inline_<family>/_base_/).
_base_ = [
    'mmdet::_base_/models/cascade-mask-rcnn_r50_fpn.py',
    'mmdet::_base_/datasets/coco_instance.py',
    'mmdet::_base_/schedules/schedule_1x.py',
    'mmdet::_base_/default_runtime.py',
]
# inline_mm registers the backbones; inline_mm.engine.enable switches on its training fixes
# for mmengine (CPU DDP, checkpoint pruning and resume fallback) under any launcher.
custom_imports = dict(imports=['inline_mm', 'inline_mm.engine.enable'],
                      allow_failed_imports=False)


def _box_head(target_stds):
    # SyncBN as in mmdet's cascades: with one process (tools/train.py, CPU or one GPU)
    # mmengine turns it into plain BN; in a multi-process CPU run inline_mm does.
    return dict(
        type='Shared4Conv1FCBBoxHead',
        in_channels=256,
        conv_out_channels=256,
        fc_out_channels=1024,
        roi_feat_size=7,
        num_classes=80,
        bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[0., 0., 0., 0.],
                        target_stds=target_stds),
        reg_class_agnostic=False,
        reg_decoded_bbox=True,
        norm_cfg=dict(type='SyncBN', requires_grad=True),
        loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=False, loss_weight=1.0),
        loss_bbox=dict(type='GIoULoss', loss_weight=10.0))


model = dict(
    # Proposals only from each image's own anchors, as in ./mask-rcnn_fpn_1x_coco.py.
    rpn_head=dict(type='PadAwareRPNHead'),
    # Each stage regresses from the previous stage's boxes, so its targets tighten:
    # the base's three target scales, stage by stage.
    roi_head=dict(bbox_head=[
        _box_head([0.1, 0.1, 0.2, 0.2]),
        _box_head([0.05, 0.05, 0.1, 0.1]),
        _box_head([0.033, 0.033, 0.067, 0.067]),
    ]))

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
    # No decay on the backbone's LayerNorm gains/biases: they set scales and offsets
    # rather than capacity (as in the Swin recipe). The heads' batch norms ('...bn') decay
    # as in mmdet's cascades. Families add their position tables.
    paramwise_cfg=dict(custom_keys={
        'norm': dict(decay_mult=0.),
    }))
