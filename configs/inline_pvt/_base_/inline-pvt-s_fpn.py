_base_ = './inline-pvt-t_fpn.py'
# InLine-PVT-S; drop path 0.2 as the lab's PVT-S Mask R-CNN (ImageNet: 0.1).
inline_model = dict(
    backbone=dict(arch='small', drop_path_rate=0.2,
                  init_cfg=dict(checkpoint='inline://pvt_s')))
