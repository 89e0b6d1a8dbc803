# Mask R-CNN + FPN, InLine-PVT-T on COCO, 1x (12 epochs).
_base_ = ['../_base_/mask-rcnn_fpn_1x_coco.py', './_base_/inline-pvt-t_fpn.py']
# drop path of this schedule and size (tests/config_spec.py, DROP_PATH)
model = dict(_base_.inline_model,
             backbone=dict(_base_.inline_model.backbone, drop_path_rate=0.1))
optim_wrapper = {{_base_.inline_optim_wrapper}}
