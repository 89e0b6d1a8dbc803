_base_ = './mask-rcnn_inline-deit-t_simple-fpn_ms-crop-3x_coco.py'
# InLine-DeiT-S (320 wide), 3x multi-scale + crop.
model = dict(
    backbone=dict(arch='small', init_cfg=dict(checkpoint='inline://deit_s')),
    neck=dict(in_channels=320))
