_base_ = './inline-pvt-t_fpn.py'
# InLine-PVT-L (drop path: each config, by schedule; ImageNet: 0.3).
inline_model = dict(
    backbone=dict(arch='large', init_cfg=dict(checkpoint='inline://pvt_l')))
