# Mask R-CNN + simple FPN, InLine-DeiT-T on COCO, 1x (12 epochs) multi-scale + crop.
_base_ = ['../_base_/mask-rcnn_fpn_ms-crop-1x_coco.py', './_base_/inline-deit-t_simple-fpn.py']
model = {{_base_.inline_model}}
optim_wrapper = {{_base_.inline_optim_wrapper}}
