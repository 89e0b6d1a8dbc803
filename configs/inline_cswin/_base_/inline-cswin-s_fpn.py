_base_ = './inline-cswin-t_fpn.py'
# InLine-CSwin-S (drop path: each config, by schedule; ImageNet: 0.4).
inline_model = dict(
    backbone=dict(arch='small', init_cfg=dict(checkpoint='inline://cswin_s')))
