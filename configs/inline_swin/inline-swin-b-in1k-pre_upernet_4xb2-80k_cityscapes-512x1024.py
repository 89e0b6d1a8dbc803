_base_ = './inline-swin-t-in1k-pre_upernet_4xb2-80k_cityscapes-512x1024.py'
# InLine-Swin-B (base, 128 channels); drop path 0.5 as its ADE20K UperNet (the lab's Agent-Swin-B).
model = dict(
    backbone=dict(arch='base', drop_path_rate=0.5,
                  init_cfg=dict(checkpoint='inline://swin_b')),
    decode_head=dict(in_channels=[128, 256, 512, 1024]),
    auxiliary_head=dict(in_channels=512))
