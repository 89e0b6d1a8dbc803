_base_ = './mask-rcnn_inline-deit-t_simple-fpn_1x_coco.py'
# InLine-DeiT-S: 320 wide, position table trained at 288 (18x18 grid).
model = dict(
    backbone=dict(arch='small', init_cfg=dict(checkpoint='inline://deit_s')),
    neck=dict(in_channels=320))
