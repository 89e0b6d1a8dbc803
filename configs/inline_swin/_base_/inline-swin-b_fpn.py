_base_ = './inline-swin-t_fpn.py'
# InLine-Swin-B (drop path: each config, by schedule; ImageNet: 0.5).
inline_model = dict(
    backbone=dict(arch='base', init_cfg=dict(checkpoint='inline://swin_b')),
    neck=dict(in_channels=[128, 256, 512, 1024]))
