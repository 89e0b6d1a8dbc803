# COCO detection (boxes only) on the 1x schedule of the InLine detection recipes: mmdet's
# COCO detection data with the schedule, runtime and optimiser of ./adamw_1x.py. Shared by
# the one-stage detectors (./retinanet_fpn_1x_coco.py, ./fcos_fpn_gn-head_1x_coco.py).
_base_ = ['mmdet::_base_/datasets/coco_detection.py', './adamw_1x.py']
