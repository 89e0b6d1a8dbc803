# Semantic FPN on Cityscapes as the InLine-PVT configs train it: 512x1024 crops, 80k
# iterations, 8 images per step (4 GPUs x 2; mmseg's Cityscapes setting), whole-image
# 1024x2048 inference. The optimiser of the ADE20K Semantic FPN recipe
# (./fpn_4xb4-40k_ade20k-512x512.py): AdamW lr 2e-4, wd 1e-4, poly decay (power 0.9) to 0,
# no warm-up, no decay on norms. A family's config lists mmseg's FPN model base beside this
# file and sets the backbone, the neck's input widths and its own no-decay keys.
_base_ = [
    './cityscapes_512x1024.py',   # mmseg's Cityscapes + the mask checks (and custom_imports)
    'mmseg::_base_/default_runtime.py',
    'mmseg::_base_/schedules/schedule_80k.py',
]

optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=2e-4, betas=(0.9, 0.999), weight_decay=1e-4),
    paramwise_cfg=dict(custom_keys={
        'norm': dict(decay_mult=0.),
    }))

param_scheduler = [
    dict(type='PolyLR', eta_min=0.0, power=0.9, begin=0, end=80000, by_epoch=False),
]

train_dataloader = dict(batch_size=2)
val_dataloader = dict(batch_size=1)
test_dataloader = val_dataloader
