_base_ = './inline-cswin-t_fpn.py'
# InLine-CSwin-B (drop path: each config, by schedule; ImageNet: 0.5).
inline_model = dict(
    backbone=dict(arch='base', init_cfg=dict(checkpoint='inline://cswin_b')),
    neck=dict(in_channels=[96, 192, 384, 768]))
