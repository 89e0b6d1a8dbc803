# UperNet on Cityscapes as the InLine UperNet configs train it: 512x1024 crops, 80k
# iterations, 8 images per step (4 GPUs x 2; mmseg's Cityscapes setting), whole-image
# 1024x2048 inference. The optimiser of the ADE20K UperNet recipe
# (./upernet_8xb2-160k_ade20k-512x512.py): AdamW lr 6e-5, wd 0.01, one poly decay (power 1)
# to 0 over the run, its first 1500 iterations scaled by a linear warm-up, no decay on
# norms. A family's config lists mmseg's UperNet model base beside this file and sets the
# backbone, the heads' input widths and the no-decay keys of its own parameters.
_base_ = [
    './cityscapes_512x1024.py',   # mmseg's Cityscapes + the mask checks (and custom_imports)
    'mmseg::_base_/default_runtime.py',
    'mmseg::_base_/schedules/schedule_80k.py',
]

optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=6e-5, betas=(0.9, 0.999), weight_decay=0.01),
    paramwise_cfg=dict(custom_keys={
        'norm': dict(decay_mult=0.),
    }))

param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=1500),
    dict(type='PolyLR', eta_min=0.0, power=1.0, begin=0, end=80000, by_epoch=False),
]

train_dataloader = dict(batch_size=2)
val_dataloader = dict(batch_size=1)
test_dataloader = val_dataloader
