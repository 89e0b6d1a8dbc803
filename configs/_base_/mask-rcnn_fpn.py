# The Mask R-CNN + FPN model of the InLine detection recipes (./mask-rcnn_fpn_1x_coco.py,
# ./mask-rcnn_fpn_ms-crop-3x_coco.py): mmdet's, with a ResNet-50 that a family's configs
# replace by their backbone.
_base_ = 'mmdet::_base_/models/mask-rcnn_r50_fpn.py'

# Proposals for an image come only from the anchors on its own cells (those its training
# targets use), not from the padding that batching adds next to a smaller image: with the
# padding-aware InLine backbones an image gets the same detections alone and batched.
model = dict(rpn_head=dict(type='PadAwareRPNHead'))
