# The shared Mask R-CNN recipe (./mask-rcnn_fpn_1x_coco.py) on a 3x schedule (36 epochs,
# steps at 27 and 33) with the DETR-style multi-scale + random crop augmentation
# (./coco_instance_ms-crop-3x.py).
_base_ = ['./mask-rcnn_fpn.py', './coco_instance_ms-crop-3x.py']
