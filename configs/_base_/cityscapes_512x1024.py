# Cityscapes (19 classes, fine annotations) as mmseg's base reads it: 512x1024 crops of
# images resized to 1024..4096 x 512..2048 (0.5-2x of 2048x1024), whole 1024x2048 images
# at test time; plus the checks of ./ade20k_512x512.py (a mask of another size than its
# image, labels outside 0..18 and 255, an image too small for the backbone), each
# refusing a bad sample where it is read, naming its files. The masks are the
# `*_gtFine_labelTrainIds.png` files that cityscapesscripts' createTrainIdLabelImgs writes
# (mmseg's tools/dataset_converters/cityscapes.py runs it).
_base_ = 'mmseg::_base_/datasets/cityscapes.py'
custom_imports = dict(imports=['inline_mm', 'inline_mm.engine.enable'],
                      allow_failed_imports=False)

crop_size = (512, 1024)
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations'),
    dict(type='CheckSegMapSize'),
    dict(type='CheckSegLabels', num_classes=19),
    dict(type='RandomResize', scale=(2048, 1024), ratio_range=(0.5, 2.0), keep_ratio=True),
    dict(type='RandomCrop', crop_size=crop_size, cat_max_ratio=0.75),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PhotoMetricDistortion'),
    dict(type='PackSegInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=(2048, 1024), keep_ratio=True),
    dict(type='CheckImageSize'),
    dict(type='LoadAnnotations'),        # after Resize: scored at full size
    dict(type='CheckSegMapSize'),
    dict(type='CheckSegLabels', num_classes=19),
    dict(type='PackSegInputs'),
]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader
