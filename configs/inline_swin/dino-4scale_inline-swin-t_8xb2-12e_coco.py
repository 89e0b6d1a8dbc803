# DINO (4 scales), InLine-Swin-T on COCO, 12 epochs: mmdet's DINO recipe (AdamW lr 1e-4,
# wd 1e-4, gradient clipping 0.1, backbone at 0.1x, 16 images per step) with the backbone's
# strides 8-32 mapped to the encoder's 4 levels (the 4th from the last map).
_base_ = ['mmdet::dino/dino-4scale_r50_8xb2-12e_coco.py', './_base_/inline-swin-t_query-heads.py']
custom_imports = dict(imports=['inline_mm', 'inline_mm.engine.enable'],
                      allow_failed_imports=False)
# The backbone of the folder's query-based heads (./_base_/inline-swin-t_query-heads.py:
# InLine-Swin-T, ImageNet-1k weights) with the drop path of mmdet's DINO Swin config (0.2,
# also its ImageNet recipe's), from stride 8 on.
model = dict(
    backbone=dict(_base_.inline_mask2former_backbone, drop_path_rate=0.2, out_indices=(1, 2, 3)),
    neck=dict(in_channels=[192, 384, 768]))
optim_wrapper = dict(paramwise_cfg=dict(custom_keys={{_base_.inline_custom_keys}}))
