# Mask R-CNN + FPN with an InLine-Swin-T backbone on COCO: the shared 3x multi-scale + crop
# recipe (../_base_/mask-rcnn_fpn_ms-crop-3x_coco.py); backbone as in the 1x config.
_base_ = '../_base_/mask-rcnn_fpn_ms-crop-3x_coco.py'

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

# No decay on the relative position bias tables (see the 1x config).
optim_wrapper = dict(paramwise_cfg=dict(custom_keys={
    'relative_position_bias_table': dict(decay_mult=0.),
}))
