# ADE20K as mmseg's base reads it (512x512 crops), plus one step in the train and test
# pipelines: CheckSegMapSize (inline_mm.engine) right after LoadAnnotations refuses a mask
# of another size than its image with an error naming both files. Without it mmseg trains
# on such a pair silently (RandomResize scales image and mask into the same box, so the
# mask is stretched over the image) and evaluation fails after the whole run with an
# IndexError about shapes. The check compares two shapes: no measurable cost.
_base_ = 'mmseg::_base_/datasets/ade20k.py'
custom_imports = dict(imports=['inline_mm', 'inline_mm.engine.enable'],
                      allow_failed_imports=False)

crop_size = (512, 512)
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='CheckSegMapSize'),
    dict(type='RandomResize', scale=(2048, 512), ratio_range=(0.5, 2.0), keep_ratio=True),
    dict(type='RandomCrop', crop_size=crop_size, cat_max_ratio=0.75),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PhotoMetricDistortion'),
    dict(type='PackSegInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=(2048, 512), keep_ratio=True),
    dict(type='LoadAnnotations', reduce_zero_label=True),   # after Resize: scored at full size
    dict(type='CheckSegMapSize'),
    dict(type='PackSegInputs'),
]
# Not run by default: decoding all 25,574 ADE20K pairs before training takes ~2 min on 2
# cores (README, "Reliability"). To refuse truncated/corrupt files before iteration 1:
#   custom_hooks = [dict(type='DatasetCheckHook')]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader
