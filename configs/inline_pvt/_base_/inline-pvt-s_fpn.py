_base_ = './inline-pvt-t_fpn.py'
# InLine-PVT-S; drop path as in its ImageNet recipe.
inline_model = dict(
    backbone=dict(arch='small', drop_path_rate=0.1,
                  init_cfg=dict(checkpoint='inline://pvt_s')))
