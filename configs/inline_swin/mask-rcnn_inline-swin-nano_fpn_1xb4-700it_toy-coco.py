# The README demo (`make demo`): the nano InLine-Swin Mask R-CNN of
# mask-rcnn_inline-swin-nano_fpn_1xb4-550it_toy-coco.py trained for 700 iterations instead of
# 550, at twice its learning rate and without stochastic depth: at 550 iterations 3 of 5 seeds
# reached box AP 0.55 and one stayed below 0.5 (docs/dev/get_started.md, "The demo").
# Make the data first (`python tools/misc/make_toy_dataset.py coco data/toy_coco`), then
# `python tools/train.py <this config>`, or `make demo`, which also draws the predictions.
_base_ = './mask-rcnn_inline-swin-nano_fpn_1xb4-550it_toy-coco.py'

# No stochastic depth: a few hundred iterations from scratch underfit, nothing to regularise.
model = dict(backbone=dict(drop_path_rate=0.0))

max_iters = 700
train_cfg = dict(max_iters=max_iters, val_interval=max_iters)
# The same shape of schedule: warm-up, then steps at 3/4 and 11/12 of the run.
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=50),
    dict(type='MultiStepLR', by_epoch=False, begin=0, end=max_iters,
         milestones=[525, 642], gamma=0.1),
]
# From scratch (no ImageNet weights to preserve): 10x the COCO fine-tuning lr.
optim_wrapper = dict(optimizer=dict(lr=1e-3))
default_hooks = dict(checkpoint=dict(interval=max_iters))
