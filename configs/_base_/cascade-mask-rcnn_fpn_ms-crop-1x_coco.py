# The Cascade Mask R-CNN recipe (./cascade-mask-rcnn_fpn_1x_coco.py) with the multi-scale +
# crop augmentation (./coco_instance_ms-crop-1x.py), as the InLine authors' Agent-Swin-T
# Cascade 1x; the InLine-Swin `_1x_coco` cascades use it, the InLine-PVT ones the single-scale
# ./cascade-mask-rcnn_fpn_1x_coco.py (no PVT cascade in the lab: the PVT Mask R-CNN recipe).
_base_ = ['./cascade-mask-rcnn_fpn.py', './coco_instance_ms-crop-1x.py']
