# FCOS + FPN with its GroupNorm head on COCO, 1x (12 epochs): the model of mmdet's
# fcos_r50-caffe_fpn_gn-head_1x_coco.py (mmdet has no model-only base for FCOS) on the
# InLine 1x recipe (./coco_detection_1x.py: AdamW lr 1e-4, wd 0.05, 16 images per step).
# A family's config sets the backbone and the FPN's input widths (FCOS reads P3-P7).
_base_ = './coco_detection_1x.py'

model = dict(
    type='FCOS',
    # ImageNet RGB statistics: the InLine backbones' (mmdet's FCOS uses caffe BGR ones)
    data_preprocessor=dict(
        type='DetDataPreprocessor',
        mean=[123.675, 116.28, 103.53],
        std=[58.395, 57.12, 57.375],
        bgr_to_rgb=True,
        pad_size_divisor=32),
    neck=dict(
        type='FPN',
        out_channels=256,
        start_level=0,
        add_extra_convs='on_output',    # P6 from P5, P7 from P6
        num_outs=5,
        relu_before_extra_convs=True),
    bbox_head=dict(
        type='FCOSHead',
        num_classes=80,
        in_channels=256,
        stacked_convs=4,
        feat_channels=256,
        strides=[8, 16, 32, 64, 128],
        loss_cls=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25,
                      loss_weight=1.0),
        loss_bbox=dict(type='IoULoss', loss_weight=1.0),
        loss_centerness=dict(type='CrossEntropyLoss', use_sigmoid=True, loss_weight=1.0)),
    test_cfg=dict(
        nms_pre=1000,
        min_bbox_size=0,
        score_thr=0.05,
        nms=dict(type='nms', iou_threshold=0.5),
        max_per_img=100))
