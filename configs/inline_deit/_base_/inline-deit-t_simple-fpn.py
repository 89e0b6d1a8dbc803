# InLine-DeiT-T
# as every COCO detection config of this folder builds it (Mask R-CNN and Cascade Mask
# R-CNN, 1x and 3x; the AMP configs are their children): backbone and neck, and the
# no-decay keys of its own parameters; not the drop path, which depends on the schedule. A
# config takes them as
#   model = dict(_base_.inline_model,
#                backbone=dict(_base_.inline_model.backbone, drop_path_rate=...))
#   optim_wrapper = {{_base_.inline_optim_wrapper}}
# beside its recipe in `_base_`: mmengine merges no two bases that set the same key, so a
# fragment cannot set `model` itself. The other variants' fragments are children of this one.
# The plain backbone gives one stride-16 map (block 12 through the released final norm);
# ViTDet's simple feature pyramid (SimpleFPN, channel LayerNorms; registered by inline_mm)
# makes strides 4, 8, 16, 32 from it, and 64 by subsampling for the RPN. The position
# table is resized to every input's patch grid, so any scale works.
width = 192
inline_model = dict(
    backbone=dict(
        _delete_=True,
        type='InLineDeiT',
        arch='tiny',
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
# No decay on the position table and the class token either (the recipe exempts norms,
# the pyramid's included): decay would only erode what ImageNet taught them.
inline_optim_wrapper = dict(paramwise_cfg=dict(custom_keys={
    'pos_embed': dict(decay_mult=0.),
    'cls_token': dict(decay_mult=0.),
}))
