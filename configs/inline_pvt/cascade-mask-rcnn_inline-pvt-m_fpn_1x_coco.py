_base_ = './cascade-mask-rcnn_inline-pvt-t_fpn_1x_coco.py'
# InLine-PVT-M; drop path as in its ImageNet recipe.
model = dict(
    backbone=dict(arch='medium', drop_path_rate=0.3,
                  init_cfg=dict(checkpoint='inline://pvt_m')))
