_base_ = './inline-swin-t-in1k-pre_upernet_4xb2-80k_cityscapes-512x1024.py'
# Same training; testing slides a 512x1024 window (the training crop) with stride 341x683
# (a third of overlap) over each 1024x2048 image instead of one whole pass: 3x3 windows,
# every prediction made at the size the model was trained on. It costs ~2.5x the time of
# the whole-image pass.
model = dict(test_cfg=dict(mode='slide', crop_size=(512, 1024), stride=(341, 683)))
