_base_ = './mask-rcnn_inline-cswin-t_fpn_ms-crop-3x_coco.py'
# InLine-CSwin-S; drop path as in its ImageNet recipe.
model = dict(
    backbone=dict(arch='small', drop_path_rate=0.4,
                  init_cfg=dict(checkpoint='inline://cswin_s')))
