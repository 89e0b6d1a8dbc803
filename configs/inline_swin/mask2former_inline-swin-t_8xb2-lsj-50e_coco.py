# Mask2Former (instance segmentation), InLine-Swin-T on COCO: mmdet's Mask2Former recipe
# (large-scale jitter to 1024x1024, 50 epochs as 368,750 iterations, AdamW lr 1e-4, wd 0.05,
# backbone at 0.1x, 16 images per step).
_base_ = ['mmdet::mask2former/mask2former_r50_8xb2-lsj-50e_coco.py',
          './_base_/inline-swin-t_query-heads.py']
custom_imports = dict(imports=['inline_mm', 'inline_mm.engine.enable'],
                      allow_failed_imports=False)
model = dict(
    backbone={{_base_.inline_mask2former_backbone}},
    panoptic_head=dict(in_channels=[96, 192, 384, 768]),
    init_cfg=None)
optim_wrapper = dict(paramwise_cfg=dict(custom_keys={{_base_.inline_custom_keys}}))
