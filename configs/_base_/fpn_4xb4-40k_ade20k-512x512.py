# Semantic FPN on ADE20K as the InLine-PVT configs train it: 512x512 crops, 40k
# iterations, 16 images per step (4 GPUs x 4, where the lab's configs say 8 x 2). The
# recipe of the InLine authors' Agent-PVT Semantic FPN configs (PVT's own Semantic FPN
# recipe): AdamW lr 2e-4, weight decay 1e-4 on every parameter, poly decay (power 0.9) to 0,
# no warm-up. A family's config lists mmseg's FPN model base beside this file (mmengine
# merges no two bases that set the same key) and sets the backbone and the neck's input
# widths. Every value and its source: tests/config_spec.py.
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
    optimizer=dict(type='AdamW', lr=2e-4, betas=(0.9, 0.999), weight_decay=1e-4))

param_scheduler = [
    dict(type='PolyLR', eta_min=0.0, power=0.9, begin=0, end=40000, by_epoch=False),
]

train_dataloader = dict(batch_size=4)
val_dataloader = dict(batch_size=1)
test_dataloader = val_dataloader
