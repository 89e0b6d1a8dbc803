# Mask R-CNN + FPN on COCO, 1x schedule (12 epochs): the recipe every InLine backbone's
# detection config shares. Recipe of the InLine authors' sibling linear-attention detectors
# (Agent-Attention, MLLA): AdamW lr 1e-4, wd 0.05, 16 images per step (8 GPUs x 2), steps at
# epochs 8 and 11. A family's configs (configs/inline_<family>/mask-rcnn_*_coco.py) replace
# the base's ResNet-50 with their backbone, its neck widths and the no-decay keys of its own
# parameters, from the variant's fragment (configs/inline_<family>/_base_/).
_base_ = [
    'mmdet::_base_/models/mask-rcnn_r50_fpn.py',
    'mmdet::_base_/datasets/coco_instance.py',
    'mmdet::_base_/schedules/schedule_1x.py',
    'mmdet::_base_/default_runtime.py',
]
# inline_mm registers the backbones; inline_mm.engine.enable switches on its training fixes
# for mmengine (CPU DDP, checkpoint pruning and resume fallback) under any launcher.
custom_imports = dict(imports=['inline_mm', 'inline_mm.engine.enable'],
                      allow_failed_imports=False)

# Proposals for an image come only from the anchors on its own cells (those its training
# targets use), not from the padding that batching adds next to a smaller image: with the
# padding-aware InLine backbones an image gets the same detections alone and batched.
model = dict(rpn_head=dict(type='PadAwareRPNHead'))
# Not run by default: decoding COCO's 123k images before training takes ~6 min on one core
# (~3 ms a JPEG; docs/reliability.md). To refuse missing/truncated/corrupt images before
# iteration 1:
#   custom_hooks = [dict(type='DatasetCheckHook')]

max_epochs = 12
train_cfg = dict(max_epochs=max_epochs)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=1000),
    dict(type='MultiStepLR', begin=0, end=max_epochs, by_epoch=True, milestones=[8, 11],
         gamma=0.1),
]

optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(_delete_=True, type='AdamW', lr=1e-4, betas=(0.9, 0.999),
                   weight_decay=0.05),
    # No decay on LayerNorm gains/biases: they set scales and offsets rather than model
    # capacity, and decaying them toward zero only fights the normalisation (as in the
    # Swin recipe). Families add their position tables.
    paramwise_cfg=dict(custom_keys={
        'norm': dict(decay_mult=0.),
    }))
