_base_ = './inline-swin-t_fpn.py'
# InLine-Swin-B; drop path 0.4 as the lab's Swin-B Cascade (ImageNet: 0.5).
inline_model = dict(
    backbone=dict(arch='base', drop_path_rate=0.4,
                  init_cfg=dict(checkpoint='inline://swin_b')),
    neck=dict(in_channels=[128, 256, 512, 1024]))
