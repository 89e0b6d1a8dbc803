_base_ = './inline-pvt-t_fpn.py'
# InLine-PVT-M; drop path 0.1 as the lab's PVT-M Mask R-CNN (ImageNet: 0.3).
inline_model = dict(
    backbone=dict(arch='medium', drop_path_rate=0.1,
                  init_cfg=dict(checkpoint='inline://pvt_m')))
