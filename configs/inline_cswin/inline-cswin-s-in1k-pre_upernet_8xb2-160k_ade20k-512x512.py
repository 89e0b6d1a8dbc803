_base_ = './inline-cswin-t-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py'
# InLine-CSwin-S; drop path 0.3, the Swin-S UperNet rate (ImageNet: 0.4).
model = dict(
    backbone=dict(arch='small', drop_path_rate=0.3,
                  init_cfg=dict(checkpoint='inline://cswin_s')))
