_base_ = './cascade-mask-rcnn_inline-pvt-t_fpn_1x_coco.py'
# InLine-PVT-S; drop path as in its ImageNet recipe.
model = dict(
    backbone=dict(arch='small', drop_path_rate=0.1,
                  init_cfg=dict(checkpoint='inline://pvt_s')))
