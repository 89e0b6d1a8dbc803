# Mask R-CNN + FPN on COCO, 1x schedule (12 epochs) at mmdet's single scale (1333x800): the
# model (./mask-rcnn_fpn.py) with the data, schedule and optimiser of ./coco_instance_1x.py
# (AdamW lr 1e-4, wd 0.05, 16 images per step, steps at epochs 8 and 11). The InLine-PVT 1x
# configs use it, as the lab's PVT detectors train single scale (their fragment sets the PVT
# optimiser); the Swin, CSwin and DeiT 1x configs add the multi-scale + crop augmentation
# (./mask-rcnn_fpn_ms-crop-1x_coco.py). A family's configs (configs/inline_<family>/) replace
# the base's ResNet-50 with their backbone, its neck widths and the no-decay keys of its own
# parameters, from the variant's fragment (configs/inline_<family>/_base_/).
_base_ = ['./mask-rcnn_fpn.py', './coco_instance_1x.py']
