# Cascade Mask R-CNN + FPN with an InLine-PVT-T backbone (all blocks InLine, global) on
# COCO, 3x schedule (36 epochs) with multi-scale + crop: the shared recipe
# (../_base_/cascade-mask-rcnn_fpn_ms-crop-3x_coco.py); backbone as in the Mask R-CNN configs.
_base_ = '../_base_/cascade-mask-rcnn_fpn_ms-crop-3x_coco.py'

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
