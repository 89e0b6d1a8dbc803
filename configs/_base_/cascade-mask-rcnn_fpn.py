# The Cascade Mask R-CNN + FPN model of the InLine detection recipes
# (./cascade-mask-rcnn_fpn_1x_coco.py, ./cascade-mask-rcnn_fpn_ms-crop-3x_coco.py): mmdet's
# own Cascade Mask R-CNN with the box heads of the Swin authors' cascades and of mmdet's
# ConvNeXt one (configs/convnext/cascade-mask-rcnn_convnext-*: four 3x3 convs with batch norm
# and one fc per stage, box targets decoded and scored by GIoU).
_base_ = 'mmdet::_base_/models/cascade-mask-rcnn_r50_fpn.py'


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
    # Proposals only from each image's own anchors, as in ./mask-rcnn_fpn.py.
    rpn_head=dict(type='PadAwareRPNHead'),
    # Each stage regresses from the previous stage's boxes, so its targets tighten:
    # the base's three target scales, stage by stage.
    roi_head=dict(bbox_head=[
        _box_head([0.1, 0.1, 0.2, 0.2]),
        _box_head([0.05, 0.05, 0.1, 0.1]),
        _box_head([0.033, 0.033, 0.067, 0.067]),
    ]))
