_base_ = './inline-swin-t-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py'
# InLine-Swin-B (128 channels; stage 3 starts with 2 InLine blocks); drop path 0.5 as
# the lab's Agent-Swin-B UperNet.
model = dict(
    backbone=dict(arch='base', drop_path_rate=0.5,
                  init_cfg=dict(checkpoint='inline://swin_b')),
    decode_head=dict(in_channels=[128, 256, 512, 1024]),
    auxiliary_head=dict(in_channels=512))
