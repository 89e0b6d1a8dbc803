_base_ = './fpn_inline-pvt-t_4xb4-40k_ade20k-512x512.py'
# InLine-PVT-M (medium); drop path 0.2 as the lab's PVT-M Semantic FPN.
model = dict(
    backbone=dict(arch='medium', drop_path_rate=0.2,
                  init_cfg=dict(checkpoint='inline://pvt_m')))
