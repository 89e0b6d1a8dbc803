# Cascade Mask R-CNN + FPN on COCO, 1x schedule (12 epochs): mmdet's own Cascade Mask R-CNN
# with the Swin / ConvNeXt cascades' box heads (./cascade-mask-rcnn_fpn.py), trained as the
# Mask R-CNN configs train (./coco_instance_1x.py, as ./mask-rcnn_fpn_1x_coco.py). A
# family's configs (configs/inline_<family>/cascade-mask-rcnn_*_coco.py) take the backbone,
# its neck widths and its no-decay keys from the same fragment as the Mask R-CNN configs
# (configs/inline_<family>/_base_/).
_base_ = ['./cascade-mask-rcnn_fpn.py', './coco_instance_1x.py']
