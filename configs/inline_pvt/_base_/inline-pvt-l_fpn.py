_base_ = './inline-pvt-t_fpn.py'
# InLine-PVT-L; drop path as in its ImageNet recipe.
inline_model = dict(
    backbone=dict(arch='large', drop_path_rate=0.3,
                  init_cfg=dict(checkpoint='inline://pvt_l')))
