# Mask R-CNN + FPN, InLine-CSwin-B on COCO, 1x (12 epochs) multi-scale + crop.
_base_ = ['../_base_/mask-rcnn_fpn_ms-crop-1x_coco.py', './_base_/inline-cswin-b_fpn.py']
# drop path of this schedule and size (tests/config_spec.py, DROP_PATH)
model = dict(_base_.inline_model,
             backbone=dict(_base_.inline_model.backbone, drop_path_rate=0.1))
