# Mask R-CNN with an InLine-DeiT-T backbone and ViTDet's simple feature pyramid on COCO: the
# shared 3x multi-scale + crop recipe (../_base_/mask-rcnn_fpn_ms-crop-3x_coco.py); model as in
# the 1x config. The position table is resized to every input's patch grid, so any scale works.
_base_ = '../_base_/mask-rcnn_fpn_ms-crop-3x_coco.py'

width = 192
model = dict(
    backbone=dict(
        _delete_=True,
        type='InLineDeiT',
        arch='tiny',
        drop_path_rate=0.1,
        out_indices=(11,),
        final_norm=True,
        with_cp=False,
        # Official ImageNet weights: downloaded once into the weights cache (checkpoints/README.md).
        init_cfg=dict(type='Pretrained', checkpoint='inline://deit_t')),
    neck=dict(
        _delete_=True,
        type='SimpleFPN',
        in_channels=width,
        out_channels=256,
        scales=(4, 2, 1, 0.5),
        num_outs=5,
        norm_cfg=dict(type='LN2d', eps=1e-6)))

# No decay on the position table and the class token either (the base exempts norms,
# the pyramid's included): decay would only erode what ImageNet taught them.
optim_wrapper = dict(paramwise_cfg=dict(custom_keys={
    'pos_embed': dict(decay_mult=0.),
    'cls_token': dict(decay_mult=0.),
}))
