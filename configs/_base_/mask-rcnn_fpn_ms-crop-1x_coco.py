# The shared Mask R-CNN recipe (./mask-rcnn_fpn_1x_coco.py) with the multi-scale + crop
# augmentation (./coco_instance_ms-crop-1x.py): the 1x recipe of the InLine authors' Swin
# detectors (Agent-Attention, MLLA), which the InLine-Swin, -CSwin and -DeiT `_1x_coco`
# configs use. InLine-PVT's keep ./mask-rcnn_fpn_1x_coco.py (single scale, as the lab's PVT).
_base_ = ['./mask-rcnn_fpn.py', './coco_instance_ms-crop-1x.py']
