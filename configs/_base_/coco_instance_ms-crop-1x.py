# ./coco_instance_1x.py with the DETR-style multi-scale + random crop augmentation of the
# InLine authors' Swin detectors (Agent-Attention and MLLA, 1x and 3x alike): short side
# 480..800 (long side <= 1333), or resize to 400/500/600, crop 384..600, resize as before.
# Shared by ./mask-rcnn_fpn_ms-crop-1x_coco.py, ./cascade-mask-rcnn_fpn_ms-crop-1x_coco.py and
# the 3x recipes (./coco_instance_ms-crop-3x.py). InLine-PVT trains 1x at mmdet's single scale
# (./coco_instance_1x.py), as the lab's PVT detectors do.
_base_ = './coco_instance_1x.py'
_multi_scale = [(480, 1333), (512, 1333), (544, 1333), (576, 1333), (608, 1333), (640, 1333),
                (672, 1333), (704, 1333), (736, 1333), (768, 1333), (800, 1333)]
train_pipeline = [
    dict(type='LoadImageFromFile', backend_args={{_base_.backend_args}}),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='RandomChoice', transforms=[
        [dict(type='RandomChoiceResize', scales=_multi_scale, keep_ratio=True)],
        [dict(type='RandomChoiceResize', scales=[(400, 1333), (500, 1333), (600, 1333)],
              keep_ratio=True),
         dict(type='RandomCrop', crop_type='absolute_range', crop_size=(384, 600),
              allow_negative_crop=True),
         dict(type='RandomChoiceResize', scales=_multi_scale, keep_ratio=True)],
    ]),
    dict(type='PackDetInputs'),
]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
