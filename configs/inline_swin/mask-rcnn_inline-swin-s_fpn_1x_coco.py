# Mask R-CNN + FPN, InLine-Swin-S on COCO, 1x (12 epochs) multi-scale + crop.
_base_ = ['../_base_/mask-rcnn_fpn_ms-crop-1x_coco.py', './_base_/inline-swin-s_fpn.py']
model = {{_base_.inline_model}}
optim_wrapper = {{_base_.inline_optim_wrapper}}
