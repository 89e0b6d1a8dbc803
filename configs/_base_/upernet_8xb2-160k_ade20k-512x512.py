# UperNet on ADE20K as the InLine UperNet configs (Swin, CSwin, DeiT) train it: 512x512
# crops, 160k iterations, 16 images per step (8 GPUs x 2). The recipe of the InLine authors'
# Agent-Swin and MLLA UperNets (mmseg 0.x's Swin recipe): AdamW lr 6e-5, wd 0.01 except on
# norms and position tables, one poly decay (power 1) to 0 over the 160k iterations, its
# first 1500 scaled by a linear warm-up from 1e-6 (mmseg 1.x's Swin config starts the poly
# after the warm-up instead). Every value and its source: tests/config_spec.py.
# A family's config lists mmseg's UperNet model base beside this file
# (mmengine merges no two bases that set the same key, so the model stays out of here) and
# sets the backbone, the heads' input widths and the no-decay keys of its own parameters.
# The heads keep mmseg's SyncBN (GPU runs with several processes use it). With one process
# (tools/train.py, CPU or one GPU) mmengine turns it into plain BN; in a multi-process CPU
# run (tools/dist_train.sh, gloo) inline_mm does, with a warning.
_base_ = [
    './ade20k_512x512.py',   # mmseg's ADE20K + the mask checks (and custom_imports)
    'mmseg::_base_/default_runtime.py',
    'mmseg::_base_/schedules/schedule_160k.py',
]

optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=6e-5, betas=(0.9, 0.999), weight_decay=0.01),
    # No decay on LayerNorm gains/biases: they set scales and offsets rather than capacity,
    # and pulling them toward zero only fights the normalisation (Swin recipe). Families
    # add their position tables.
    paramwise_cfg=dict(custom_keys={
        'norm': dict(decay_mult=0.),
    }))

param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=1500),
    dict(type='PolyLR', eta_min=0.0, power=1.0, begin=0, end=160000, by_epoch=False),
]

train_dataloader = dict(batch_size=2)
val_dataloader = dict(batch_size=1)
test_dataloader = val_dataloader
