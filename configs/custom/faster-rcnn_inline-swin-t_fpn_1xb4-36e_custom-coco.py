# Boxes only: Faster R-CNN + InLine-Swin-T for a COCO export without masks ("segmentation"
# missing or empty), e.g. from a box annotation tool. The Mask R-CNN template next to this
# file (data, classes from train.json, schedule, checks) without its mask branch; it scores
# box mAP. A copy next to your own Mask R-CNN copy: point _base_ at it.
_base_ = './mask-rcnn_inline-swin-t_fpn_1xb4-36e_custom-coco.py'

model = dict(
    type='FasterRCNN',
    data_preprocessor=dict(pad_mask=False),
    roi_head=dict(mask_roi_extractor=None, mask_head=None),
    train_cfg=dict(rcnn=dict(mask_size=None)))
train_dataloader = dict(dataset=dict(pipeline=[
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='RandomChoiceResize',
         scales=[(_base_.img_scale[0], s) for s in _base_.train_short_sides],
         keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs'),
]))
val_dataloader = dict(dataset=dict(pipeline=[
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale={{_base_.img_scale}}, keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='PackDetInputs',
         meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor')),
]))
test_dataloader = val_dataloader
val_evaluator = dict(metric='bbox')
test_evaluator = val_evaluator
default_hooks = dict(checkpoint=dict(save_best='coco/bbox_mAP'))
