_base_ = './cascade-mask-rcnn_inline-pvt-t_fpn_ms-crop-3x_coco.py'
# InLine-PVT-L; drop path as in its ImageNet recipe.
model = dict(
    backbone=dict(arch='large', drop_path_rate=0.3,
                  init_cfg=dict(checkpoint='inline://pvt_l')))
