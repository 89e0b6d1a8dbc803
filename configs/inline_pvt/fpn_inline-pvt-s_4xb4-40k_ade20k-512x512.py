_base_ = './fpn_inline-pvt-t_4xb4-40k_ade20k-512x512.py'
# InLine-PVT-S (small); drop path 0.1 as the lab's PVT-S Semantic FPN.
model = dict(
    backbone=dict(arch='small', drop_path_rate=0.1,
                  init_cfg=dict(checkpoint='inline://pvt_s')))
