# The 1x schedule (12 epochs) and optimiser of the InLine COCO recipes, shared by the
# instance (./coco_instance_1x.py) and box-only (./coco_detection_1x.py) data: mmdet's 1x
# schedule and runtime, AdamW lr 1e-4, wd 0.05, 16 images per step (8 GPUs x 2), linear
# warm-up over 500 iterations from 0.001x, steps at epochs 8 and 11: the Swin detection
# recipe of the InLine authors' Agent-Attention and MLLA configs (the PVT one changes the
# optimiser in configs/inline_pvt/_base_/). Every value and its source: tests/config_spec.py.
_base_ = [
    'mmdet::_base_/schedules/schedule_1x.py',
    'mmdet::_base_/default_runtime.py',
]
# inline_mm registers the backbones; inline_mm.engine.enable switches on its training fixes
# for mmengine (CPU DDP, checkpoint pruning and resume fallback) under any launcher.
custom_imports = dict(imports=['inline_mm', 'inline_mm.engine.enable'],
                      allow_failed_imports=False)
# Not run by default: decoding COCO's 123k images before training takes ~6 min on one core
# (~3 ms a JPEG; docs/reliability.md). To refuse missing/truncated/corrupt images before
# iteration 1 (COCO 2017 holds a few boxes and polygons that mmdet drops: warn of those):
#   custom_hooks = [dict(type='DatasetCheckHook', warn_only=('box-empty', 'polygon'))]

max_epochs = 12
train_cfg = dict(max_epochs=max_epochs)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=500),
    dict(type='MultiStepLR', begin=0, end=max_epochs, by_epoch=True, milestones=[8, 11],
         gamma=0.1),
]

optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(_delete_=True, type='AdamW', lr=1e-4, betas=(0.9, 0.999),
                   weight_decay=0.05),
    # No decay on the backbone's LayerNorm gains/biases: they set scales and offsets rather
    # than model capacity, and decaying them toward zero only fights the normalisation (as
    # in the lab's Swin recipe). The cascade heads' batch norms ('...bn') decay as in mmdet's
    # cascades. Families add their position tables.
    paramwise_cfg=dict(custom_keys={
        'norm': dict(decay_mult=0.),
    }))
