# Mask2Former (semantic segmentation), InLine-Swin-T on ADE20K: mmseg's Mask2Former recipe
# (short side 256..1024 then 512x512 crops, 160k iterations, AdamW lr 1e-4, wd 0.05,
# gradient clipping 0.01, backbone at 0.1x, 16 images per step), with the mask checks of
# the other ADE20K configs (../_base_/ade20k_512x512.py).
_base_ = ['mmseg::mask2former/mask2former_r50_8xb2-160k_ade20k-512x512.py',
          './_base_/inline-swin-t_query-heads.py']
# mmdet.models: Mask2Former's pixel decoder, matcher and losses are mmdet's
custom_imports = dict(imports=['mmdet.models', 'inline_mm', 'inline_mm.engine.enable'],
                      allow_failed_imports=False)
model = dict(
    backbone={{_base_.inline_mask2former_backbone}},
    decode_head=dict(in_channels=[96, 192, 384, 768]))
optim_wrapper = dict(paramwise_cfg=dict(custom_keys={{_base_.inline_custom_keys}}))

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='CheckSegMapSize'),
    dict(type='CheckSegLabels', num_classes=150),
    dict(type='RandomChoiceResize', scales=[int(512 * x * 0.1) for x in range(5, 21)],
         resize_type='ResizeShortestEdge', max_size=2048),
    dict(type='RandomCrop', crop_size={{_base_.crop_size}}, cat_max_ratio=0.75),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PhotoMetricDistortion'),
    dict(type='PackSegInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=(2048, 512), keep_ratio=True),
    dict(type='CheckImageSize'),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='CheckSegMapSize'),
    dict(type='CheckSegLabels', num_classes=150),
    dict(type='PackSegInputs'),
]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader
