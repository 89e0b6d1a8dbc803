# The Cascade Mask R-CNN recipe (./cascade-mask-rcnn_fpn_1x_coco.py) on the 3x schedule of
# the Swin and ConvNeXt cascades (36 epochs, steps at 27 and 33) with their DETR-style
# multi-scale + random crop augmentation, the same as ./mask-rcnn_fpn_ms-crop-3x_coco.py
# (./coco_instance_ms-crop-3x.py).
_base_ = ['./cascade-mask-rcnn_fpn.py', './coco_instance_ms-crop-3x.py']
