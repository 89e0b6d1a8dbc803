_base_ = './cascade-mask-rcnn_inline-swin-t_fpn_1x_coco.py'
# InLine-Swin-S; drop path as in its ImageNet recipe.
model = dict(
    backbone=dict(arch='small', drop_path_rate=0.3,
                  init_cfg=dict(checkpoint='inline://swin_s')))
