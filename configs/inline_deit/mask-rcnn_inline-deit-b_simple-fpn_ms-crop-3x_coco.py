_base_ = './mask-rcnn_inline-deit-t_simple-fpn_ms-crop-3x_coco.py'
# InLine-DeiT-B (384 wide), 3x multi-scale + crop.
model = dict(
    backbone=dict(arch='base', init_cfg=dict(checkpoint='inline://deit_b')),
    neck=dict(in_channels=384))
