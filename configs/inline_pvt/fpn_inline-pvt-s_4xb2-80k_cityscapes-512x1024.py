_base_ = './fpn_inline-pvt-t_4xb2-80k_cityscapes-512x1024.py'
# InLine-PVT-S (small); drop path 0.1 as the lab's PVT-S Semantic FPN.
model = dict(
    backbone=dict(arch='small', drop_path_rate=0.1,
                  init_cfg=dict(checkpoint='inline://pvt_s')))
