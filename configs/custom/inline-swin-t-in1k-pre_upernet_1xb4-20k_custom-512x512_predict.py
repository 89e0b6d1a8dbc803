# Predict masks for images that have none (default <data_root>/images/test), with a
# model trained by the template next to this file:
#   python tools/test.py <this file> <checkpoint> --out work_dirs/predictions
# writes work_dirs/predictions/<image stem>.png: class indices in a palette PNG with the
# colours of meta.json. Another folder: --cfg-options
#   test_dataloader.dataset.data_prefix.img_path=images/other
_base_ = './inline-swin-t-in1k-pre_upernet_1xb4-20k_custom-512x512.py'

test_dataloader = dict(
    dataset=dict(
        data_prefix=dict(_delete_=True, img_path='images/test'),
        with_masks=False,
        pipeline=[
            dict(type='LoadImageFromFile'),
            dict(type='Resize', scale={{_base_.img_scale}}, keep_ratio=True),
            dict(type='CheckImageSize'),
            dict(type='PackSegInputs'),
        ]))
test_evaluator = dict(format_only=True)    # no masks: save predictions, score nothing
