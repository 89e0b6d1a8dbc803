_base_ = './inline-swin-t-in1k-pre_upernet_4xb2-80k_cityscapes-512x1024.py'
# InLine-Swin-S (small); drop path 0.3 as its ADE20K UperNet (the lab's Agent-Swin-S).
model = dict(
    backbone=dict(arch='small', drop_path_rate=0.3,
                  init_cfg=dict(checkpoint='inline://swin_s')))
