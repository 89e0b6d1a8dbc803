# RetinaNet + FPN on COCO, 1x (12 epochs): mmdet's RetinaNet model on the InLine 1x recipe
# (./coco_detection_1x.py: AdamW lr 1e-4, wd 0.05, 16 images per step), single scale as
# the lab's Agent-PVT RetinaNets (InLine-PVT's config takes their wd 1e-4). A family's
# config replaces the ResNet-50 with its backbone and feeds the FPN from stride 8 (P3-P7).
_base_ = ['mmdet::_base_/models/retinanet_r50_fpn.py', './coco_detection_1x.py']
