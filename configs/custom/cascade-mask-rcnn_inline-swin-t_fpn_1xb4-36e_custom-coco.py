# Cascade Mask R-CNN + InLine-Swin-T on your own instance masks: the Mask R-CNN template
# next to this file (data, classes from train.json, schedule, checks) with three box stages
# of rising IoU thresholds, each regressing from the previous stage's boxes (tighter boxes
# and masks, ~1.5x the time of a Mask R-CNN step). Box heads of the InLine COCO cascades
# (configs/_base_/cascade-mask-rcnn_fpn.py): four 3x3 convs with batch norm and one fc,
# GIoU-scored. A copy next to your own Mask R-CNN copy: point _base_ at it.
_base_ = './mask-rcnn_inline-swin-t_fpn_1xb4-36e_custom-coco.py'
num_classes = _base_.num_classes


def _box_head(target_stds):
    # SyncBN as in mmdet's cascades: one process turns it into plain BN.
    return dict(
        type='Shared4Conv1FCBBoxHead', in_channels=256, conv_out_channels=256,
        fc_out_channels=1024, roi_feat_size=7, num_classes=num_classes,
        bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[0., 0., 0., 0.],
                        target_stds=target_stds),
        reg_class_agnostic=False, reg_decoded_bbox=True,
        norm_cfg=dict(type='SyncBN', requires_grad=True),
        loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=False, loss_weight=1.0),
        loss_bbox=dict(type='GIoULoss', loss_weight=10.0))


def _stage(iou):
    return dict(
        assigner=dict(type='MaxIoUAssigner', pos_iou_thr=iou, neg_iou_thr=iou, min_pos_iou=iou,
                      match_low_quality=False, ignore_iof_thr=-1),
        sampler=dict(type='RandomSampler', num=512, pos_fraction=0.25, neg_pos_ub=-1,
                     add_gt_as_proposals=True),
        mask_size=28, pos_weight=-1, debug=False)


model = dict(
    type='CascadeRCNN',
    roi_head=dict(
        _delete_=True,
        type='CascadeRoIHead',
        num_stages=3,
        stage_loss_weights=[1, 0.5, 0.25],
        bbox_roi_extractor=dict(type='SingleRoIExtractor',
                                roi_layer=dict(type='RoIAlign', output_size=7, sampling_ratio=0),
                                out_channels=256, featmap_strides=[4, 8, 16, 32]),
        bbox_head=[_box_head([0.1, 0.1, 0.2, 0.2]), _box_head([0.05, 0.05, 0.1, 0.1]),
                   _box_head([0.033, 0.033, 0.067, 0.067])],
        mask_roi_extractor=dict(type='SingleRoIExtractor',
                                roi_layer=dict(type='RoIAlign', output_size=14, sampling_ratio=0),
                                out_channels=256, featmap_strides=[4, 8, 16, 32]),
        mask_head=dict(type='FCNMaskHead', num_convs=4, in_channels=256, conv_out_channels=256,
                       num_classes=num_classes,
                       loss_mask=dict(type='CrossEntropyLoss', use_mask=True, loss_weight=1.0))),
    train_cfg=dict(rcnn=[_stage(0.5), _stage(0.6), _stage(0.7)]))
