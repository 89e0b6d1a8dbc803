# Mask R-CNN + FPN with an InLine-CSwin-T backbone (InLine stages 1-2 global, LePE stripe
# attention in stages 3-4) on COCO, 1x schedule (12 epochs): the shared recipe (../_base_/mask-rcnn_fpn_1x_coco.py).
_base_ = '../_base_/mask-rcnn_fpn_1x_coco.py'

model = dict(
    backbone=dict(
        _delete_=True,
        type='InLineCSwin',
        arch='tiny',
        drop_path_rate=0.2,  # as in its ImageNet recipe
        out_indices=(0, 1, 2, 3),
        with_cp=False,
        init_cfg=dict(type='Pretrained', checkpoint='inline://cswin_t')),
    neck=dict(in_channels=[64, 128, 256, 512]))
# Only the base's no-decay key (LayerNorms): CSwin has no position tables to exempt, its
# positional term (LePE) is a depthwise conv, decayed like any other weight.
