# The InLine-Swin-B Cascade Mask R-CNN recipe, fully sharded (../_base_/fsdp.py); same recipe
# otherwise.
_base_ = ['./cascade-mask-rcnn_inline-swin-b_fpn_1x_coco.py', '../_base_/fsdp.py']
