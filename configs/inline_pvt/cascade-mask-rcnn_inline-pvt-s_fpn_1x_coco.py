# Cascade Mask R-CNN + FPN, InLine-PVT-S on COCO, 1x (12 epochs).
_base_ = ['../_base_/cascade-mask-rcnn_fpn_1x_coco.py', './_base_/inline-pvt-s_fpn.py']
model = {{_base_.inline_model}}
optim_wrapper = {{_base_.inline_optim_wrapper}}
