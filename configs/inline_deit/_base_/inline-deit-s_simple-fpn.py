_base_ = './inline-deit-t_simple-fpn.py'
# InLine-DeiT-S: 320 wide, position table trained at 288 (18x18 grid).
inline_model = dict(
    backbone=dict(arch='small', init_cfg=dict(checkpoint='inline://deit_s')),
    neck=dict(in_channels=320))
