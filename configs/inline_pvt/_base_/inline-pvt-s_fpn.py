_base_ = './inline-pvt-t_fpn.py'
# InLine-PVT-S (drop path: each config, by schedule; ImageNet: 0.1).
inline_model = dict(
    backbone=dict(arch='small', init_cfg=dict(checkpoint='inline://pvt_s')))
