_base_ = './inline-cswin-t_fpn.py'
# InLine-CSwin-S; drop path 0.1, the Swin-S detection rate (ImageNet: 0.4).
inline_model = dict(
    backbone=dict(arch='small', drop_path_rate=0.1,
                  init_cfg=dict(checkpoint='inline://cswin_s')))
