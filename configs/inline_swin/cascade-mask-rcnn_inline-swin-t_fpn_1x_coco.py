# Cascade Mask R-CNN + FPN with an InLine-Swin-T backbone on COCO, 1x schedule (12 epochs):
# the shared recipe (../_base_/cascade-mask-rcnn_fpn_1x_coco.py); backbone as in the Mask
# R-CNN configs. Every other cascade-mask-rcnn_inline-swin-* config is a short child of this
# file or of its 3x sibling.
_base_ = '../_base_/cascade-mask-rcnn_fpn_1x_coco.py'

model = dict(
    backbone=dict(
        _delete_=True,
        type='InLineSwin',
        arch='tiny',
        drop_path_rate=0.2,
        out_indices=(0, 1, 2, 3),
        with_cp=False,
        init_cfg=dict(type='Pretrained', checkpoint='inline://swin_t')),
    neck=dict(in_channels=[96, 192, 384, 768]))

# No decay on the relative position bias tables of the softmax blocks either: they set
# positional preferences rather than capacity (as in the Swin recipe).
optim_wrapper = dict(paramwise_cfg=dict(custom_keys={
    'relative_position_bias_table': dict(decay_mult=0.),
}))
