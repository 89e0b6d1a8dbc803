_base_ = './inline-swin-t_fpn.py'
# InLine-Swin-S (drop path: each config, by schedule; ImageNet: 0.3).
inline_model = dict(
    backbone=dict(arch='small', init_cfg=dict(checkpoint='inline://swin_s')))
