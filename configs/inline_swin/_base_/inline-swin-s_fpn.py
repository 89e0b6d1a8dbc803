_base_ = './inline-swin-t_fpn.py'
# InLine-Swin-S; drop path as in its ImageNet recipe.
inline_model = dict(
    backbone=dict(arch='small', drop_path_rate=0.3,
                  init_cfg=dict(checkpoint='inline://swin_s')))
