_base_ = './inline-swin-t-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py'
# InLine-Swin-S (stages I,I,S,S); drop path 0.3 as the lab's Agent-Swin-S UperNet.
model = dict(
    backbone=dict(arch='small', drop_path_rate=0.3,
                  init_cfg=dict(checkpoint='inline://swin_s')))
