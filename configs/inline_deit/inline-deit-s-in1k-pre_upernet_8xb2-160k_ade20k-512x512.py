_base_ = './inline-deit-t-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py'
# InLine-DeiT-S: 320 wide, position table trained at 288 (18x18 grid).
width = 320
model = dict(
    backbone=dict(arch='small', init_cfg=dict(checkpoint='inline://deit_s')),
    neck=dict(in_channels=[width] * 4, out_channels=width),
    decode_head=dict(in_channels=[width] * 4),
    auxiliary_head=dict(in_channels=width))
