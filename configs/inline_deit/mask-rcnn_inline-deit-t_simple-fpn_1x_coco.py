# Mask R-CNN with an InLine-DeiT-T backbone on COCO, 1x schedule (12 epochs): the shared
# recipe (../_base_/mask-rcnn_fpn_1x_coco.py) with ViTDet's simple feature pyramid instead of
# FPN. The plain backbone gives one stride-16 map (block 12 through the released final
# norm); SimpleFPN (channel LayerNorms; registered by inline_mm) makes strides 4, 8, 16, 32
# from it, and 64 by subsampling for the RPN. Every other InLine-DeiT Mask R-CNN config is
# a short child of this file or of its 3x sibling.
_base_ = '../_base_/mask-rcnn_fpn_1x_coco.py'

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
