# Mask R-CNN + simple FPN, InLine-DeiT-B on COCO, 3x multi-scale + crop (36 epochs).
_base_ = ['../_base_/mask-rcnn_fpn_ms-crop-3x_coco.py', './_base_/inline-deit-b_simple-fpn.py']
model = {{_base_.inline_model}}
optim_wrapper = {{_base_.inline_optim_wrapper}}
