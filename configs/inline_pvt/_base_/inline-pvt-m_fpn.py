_base_ = './inline-pvt-t_fpn.py'
# InLine-PVT-M; drop path as in its ImageNet recipe.
inline_model = dict(
    backbone=dict(arch='medium', drop_path_rate=0.3,
                  init_cfg=dict(checkpoint='inline://pvt_m')))
