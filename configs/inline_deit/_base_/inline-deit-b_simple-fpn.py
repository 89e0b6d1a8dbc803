_base_ = './inline-deit-t_simple-fpn.py'
# InLine-DeiT-B: 384 wide (DeiT-S's width, not ViT-B's 768), position table trained at
# 448 (28x28 grid).
inline_model = dict(
    backbone=dict(arch='base', init_cfg=dict(checkpoint='inline://deit_b')),
    neck=dict(in_channels=384))
