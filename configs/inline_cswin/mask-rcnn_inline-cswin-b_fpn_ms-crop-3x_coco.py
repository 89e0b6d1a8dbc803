_base_ = './mask-rcnn_inline-cswin-t_fpn_ms-crop-3x_coco.py'
# InLine-CSwin-B; drop path as in its ImageNet recipe.
model = dict(
    backbone=dict(arch='base', drop_path_rate=0.5,
                  init_cfg=dict(checkpoint='inline://cswin_b')),
    neck=dict(in_channels=[96, 192, 384, 768]))
