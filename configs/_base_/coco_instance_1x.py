# COCO instance segmentation trained on the 1x schedule (12 epochs) of the InLine detection
# recipes: mmdet's COCO instance data with the schedule, runtime and optimiser of
# ./adamw_1x.py, which ./mask-rcnn_fpn_1x_coco.py and ./cascade-mask-rcnn_fpn_1x_coco.py
# share (mmengine merges no two bases with the same keys, so each recipe lists its model
# fragment and this one).
_base_ = ['mmdet::_base_/datasets/coco_instance.py', './adamw_1x.py']
