_base_ = './inline-pvt-t_fpn.py'
# InLine-PVT-L; drop path 0.2 as the lab's PVT-L Mask R-CNN (ImageNet: 0.3).
inline_model = dict(
    backbone=dict(arch='large', drop_path_rate=0.2,
                  init_cfg=dict(checkpoint='inline://pvt_l')))
