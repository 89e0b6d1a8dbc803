# mmdet's own Swin-T Mask R-CNN (shifted 7x7 Softmax windows), for the memory table beside
# the InLine recipes (benchmarks.memory); not a recipe of this project.
_base_ = 'mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py'
