# Cascade Mask R-CNN + FPN with an InLine-PVT-T backbone (all blocks InLine, global) on
# COCO, 1x schedule (12 epochs): the shared recipe (../_base_/cascade-mask-rcnn_fpn_1x_coco.py);
# backbone as in the Mask R-CNN configs. Every other cascade-mask-rcnn_inline-pvt-* config
# is a short child of this file or of its 3x sibling.
_base_ = '../_base_/cascade-mask-rcnn_fpn_1x_coco.py'

model = dict(
    backbone=dict(
        _delete_=True,
        type='InLinePVT',
        arch='tiny',
        drop_path_rate=0.1,  # as in its ImageNet recipe
        out_indices=(0, 1, 2, 3),
        with_cp=False,
        init_cfg=dict(type='Pretrained', checkpoint='inline://pvt_t')),
    neck=dict(in_channels=[64, 128, 320, 512]))
# No decay on the absolute position tables either: decay would only shrink the positional
# signal learned on ImageNet, which adds no capacity to regularise.
optim_wrapper = dict(paramwise_cfg=dict(custom_keys={
    'pos_embed': dict(decay_mult=0.),
}))
