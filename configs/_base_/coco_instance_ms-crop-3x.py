# ./coco_instance_ms-crop-1x.py (the multi-scale + crop augmentation) on the 3x schedule of
# the InLine authors' Swin detectors (Agent-Attention, MLLA): 36 epochs, steps at 27 and 33.
# Shared by ./mask-rcnn_fpn_ms-crop-3x_coco.py and ./cascade-mask-rcnn_fpn_ms-crop-3x_coco.py.
_base_ = './coco_instance_ms-crop-1x.py'

max_epochs = 36
train_cfg = dict(max_epochs=max_epochs)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=500),
    dict(type='MultiStepLR', begin=0, end=max_epochs, by_epoch=True, milestones=[27, 33],
         gamma=0.1),
]
