_base_ = './inline-deit-t-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py'
# InLine-DeiT-B: 384 wide (DeiT-S's width, not ViT-B's 768), 12 heads, position table
# trained at 448 (28x28 grid).
width = 384
model = dict(
    backbone=dict(arch='base', init_cfg=dict(checkpoint='inline://deit_b')),
    neck=dict(in_channels=[width] * 4, out_channels=width),
    decode_head=dict(in_channels=[width] * 4),
    auxiliary_head=dict(in_channels=width))
