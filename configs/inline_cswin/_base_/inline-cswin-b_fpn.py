_base_ = './inline-cswin-t_fpn.py'
# InLine-CSwin-B; drop path 0.4, the Swin-B detection rate (ImageNet: 0.5).
inline_model = dict(
    backbone=dict(arch='base', drop_path_rate=0.4,
                  init_cfg=dict(checkpoint='inline://cswin_b')),
    neck=dict(in_channels=[96, 192, 384, 768]))
