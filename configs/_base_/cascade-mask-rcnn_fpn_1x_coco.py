# Cascade Mask R-CNN + FPN on COCO, 1x schedule (12 epochs) at mmdet's single scale: mmdet's
# own Cascade Mask R-CNN with the cascade box heads of the InLine authors' Agent-Swin
# cascades and mmdet's Swin / ConvNeXt ones (./cascade-mask-rcnn_fpn.py), trained as the
# single-scale Mask R-CNN configs train (./coco_instance_1x.py, as ./mask-rcnn_fpn_1x_coco.py):
# the InLine-PVT cascades. The InLine-Swin ones take ./cascade-mask-rcnn_fpn_ms-crop-1x_coco.py.
# A family's configs take the backbone, its neck widths and its no-decay keys from the same
# fragment as the Mask R-CNN configs (configs/inline_<family>/_base_/).
_base_ = ['./cascade-mask-rcnn_fpn.py', './coco_instance_1x.py']
