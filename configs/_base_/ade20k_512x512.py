# ADE20K as mmseg's base reads it (512x512 crops), plus checks that refuse a bad sample
# where it is read, naming its files (inline_mm.engine.transforms; each costs one look at
# what the pipeline already holds):
# - CheckSegMapSize: a mask of another size than its image. mmseg trains on such a pair
#   silently (RandomResize stretches the mask over the image) and evaluation fails after
#   the whole run with an IndexError about shapes.
# - CheckSegLabels: mask labels outside 0..149 and the ignore index 255 (after
#   reduce_zero_label). mmseg trains on them until the loss meets one (IndexError: Target
#   N is out of bounds, naming no file); IoUMetric drops them without a word.
# - CheckImageSize (test pipeline): an image the resize leaves below the backbone's
#   stride; nothing pads it at test time.
# The mask checks step aside where no mask is read (MMSegInferencer, inference_model).
_base_ = 'mmseg::_base_/datasets/ade20k.py'
custom_imports = dict(imports=['inline_mm', 'inline_mm.engine.enable'],
                      allow_failed_imports=False)

crop_size = (512, 512)
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='CheckSegMapSize'),
    dict(type='CheckSegLabels', num_classes=150),
    dict(type='RandomResize', scale=(2048, 512), ratio_range=(0.5, 2.0), keep_ratio=True),
    dict(type='RandomCrop', crop_size=crop_size, cat_max_ratio=0.75),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PhotoMetricDistortion'),
    dict(type='PackSegInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=(2048, 512), keep_ratio=True),
    dict(type='CheckImageSize'),
    dict(type='LoadAnnotations', reduce_zero_label=True),   # after Resize: scored at full size
    dict(type='CheckSegMapSize'),
    dict(type='CheckSegLabels', num_classes=150),
    dict(type='PackSegInputs'),
]
# Not run by default: decoding all 25,574 ADE20K pairs before training takes ~2 min on 2
# cores (docs/reliability.md). To refuse truncated/corrupt files before iteration 1:
#   custom_hooks = [dict(type='DatasetCheckHook')]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader
