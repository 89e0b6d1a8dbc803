_base_ = './inline-swin-t-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py'
# Same training; testing slides a 512x512 window with stride 341 (a third of overlap)
# over the resized image (short side 512, long side up to 2048) instead of one whole
# pass: every prediction is made at the training crop size, and the InLine blocks see
# maps the size they were trained on. Use it for tools/test.py; it costs ~3x time.
model = dict(test_cfg=dict(mode='slide', crop_size=(512, 512), stride=(341, 341)))
