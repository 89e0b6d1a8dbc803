# Semantic FPN on ADE20K as the InLine-PVT configs train it: 512x512 crops, 40k
# iterations, 16 images per step (4 GPUs x 4). Recipe of the InLine authors' sibling
# linear-attention segmenters (Agent-Attention, MLLA; PVT's own Semantic FPN recipe):
# AdamW lr 2e-4, wd 1e-4, poly decay (power 0.9) to 0, no warm-up. A family's config lists
# mmseg's FPN model base beside this file (mmengine merges no two bases that set the same
# key) and sets the backbone, the neck's input widths and its own no-decay keys.
# The head keeps mmseg's SyncBN; with one process mmengine turns it into plain BN (see
# ./upernet_8xb2-160k_ade20k-512x512.py).
_base_ = [
    './ade20k_512x512.py',   # mmseg's ADE20K + the mask checks (and custom_imports)
    'mmseg::_base_/default_runtime.py',
    'mmseg::_base_/schedules/schedule_40k.py',
]

optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=2e-4, betas=(0.9, 0.999), weight_decay=1e-4),
    # No decay on LayerNorm gains/biases: they set scales and offsets rather than capacity.
    # At wd 1e-4 this changes little against the authors' decay-everything setting; it
    # keeps the recipes alike. Families add their position tables.
    paramwise_cfg=dict(custom_keys={
        'norm': dict(decay_mult=0.),
    }))

param_scheduler = [
    dict(type='PolyLR', eta_min=0.0, power=0.9, begin=0, end=40000, by_epoch=False),
]

train_dataloader = dict(batch_size=4)
val_dataloader = dict(batch_size=1)
test_dataloader = val_dataloader
