_base_ = './inline-swin-t_fpn.py'
# InLine-Swin-S; drop path 0.1 as the lab's Swin-S detectors (ImageNet: 0.3).
inline_model = dict(
    backbone=dict(arch='small', drop_path_rate=0.1,
                  init_cfg=dict(checkpoint='inline://swin_s')))
