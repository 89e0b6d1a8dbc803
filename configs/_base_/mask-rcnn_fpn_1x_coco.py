# Mask R-CNN + FPN on COCO, 1x schedule (12 epochs): the recipe every InLine backbone's
# detection config shares (model ./mask-rcnn_fpn.py; data, schedule and optimiser
# ./coco_instance_1x.py: AdamW lr 1e-4, wd 0.05, 16 images per step, steps at epochs 8 and
# 11). A family's configs (configs/inline_<family>/mask-rcnn_*_coco.py) replace the base's
# ResNet-50 with their backbone, its neck widths and the no-decay keys of its own
# parameters, from the variant's fragment (configs/inline_<family>/_base_/).
_base_ = ['./mask-rcnn_fpn.py', './coco_instance_1x.py']
