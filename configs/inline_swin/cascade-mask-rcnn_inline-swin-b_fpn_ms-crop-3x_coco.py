_base_ = './cascade-mask-rcnn_inline-swin-t_fpn_ms-crop-3x_coco.py'
# InLine-Swin-B; drop path as in its ImageNet recipe.
model = dict(
    backbone=dict(arch='base', drop_path_rate=0.5,
                  init_cfg=dict(checkpoint='inline://swin_b')),
    neck=dict(in_channels=[128, 256, 512, 1024]))
