_base_ = './inline-cswin-t_fpn.py'
# InLine-CSwin-S; drop path as in its ImageNet recipe.
inline_model = dict(
    backbone=dict(arch='small', drop_path_rate=0.4,
                  init_cfg=dict(checkpoint='inline://cswin_s')))
