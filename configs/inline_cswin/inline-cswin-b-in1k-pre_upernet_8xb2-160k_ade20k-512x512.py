_base_ = './inline-cswin-t-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py'
# InLine-CSwin-B; drop path 0.5, the Swin-B UperNet rate (and its ImageNet one).
model = dict(
    backbone=dict(arch='base', drop_path_rate=0.5,
                  init_cfg=dict(checkpoint='inline://cswin_b')),
    decode_head=dict(in_channels=[96, 192, 384, 768]),
    auxiliary_head=dict(in_channels=384))
