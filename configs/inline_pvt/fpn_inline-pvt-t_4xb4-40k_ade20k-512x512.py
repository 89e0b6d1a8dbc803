# Semantic FPN with an InLine-PVT-T backbone (ImageNet-1k weights) on ADE20K: 512x512
# crops, 40k iterations, 16 images per step (4 GPUs x 4). Recipe of the InLine authors'
# sibling linear-attention segmenters (Agent-Attention, MLLA; PVT's own Semantic FPN
# recipe): AdamW lr 2e-4, wd 1e-4, poly decay (power 0.9) to 0, no warm-up. Every other
# fpn_inline-pvt-* config in this folder is a short child of this file.
_base_ = [
    'mmseg::_base_/models/fpn_r50.py',
    '../_base_/ade20k_512x512.py',   # mmseg's ADE20K + the mask size check
    'mmseg::_base_/default_runtime.py',
    'mmseg::_base_/schedules/schedule_40k.py',
]
# inline_mm registers the backbones; inline_mm.engine.enable switches on its training fixes
# for mmengine (CPU DDP, checkpoint pruning and resume fallback) under any launcher.
custom_imports = dict(imports=['inline_mm', 'inline_mm.engine.enable'],
                      allow_failed_imports=False)

crop_size = (512, 512)
data_preprocessor = dict(size=crop_size)
# The head keeps the base's SyncBN (GPU runs with several processes use it). With one
# process (tools/train.py, CPU or one GPU) mmengine turns it into plain BN; in a
# multi-process CPU run (tools/dist_train.sh, gloo) inline_mm does, with a warning.
model = dict(
    data_preprocessor=data_preprocessor,
    pretrained=None,        # the base's ResNet weights; ours come from init_cfg
    backbone=dict(
        _delete_=True,
        type='InLinePVT',
        arch='tiny',
        drop_path_rate=0.1,
        out_indices=(0, 1, 2, 3),
        with_cp=False,
        # Official ImageNet weights: downloaded once into the weights cache (checkpoints/README.md).
        init_cfg=dict(type='Pretrained', checkpoint='inline://pvt_t')),
    neck=dict(in_channels=[64, 128, 320, 512]),
    decode_head=dict(num_classes=150))

optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=2e-4, betas=(0.9, 0.999), weight_decay=1e-4),
    # No decay on LayerNorm gains/biases and on the position tables: they set scales,
    # offsets and positions rather than capacity (the position tables are also resized
    # to every input, so shrinking them only blurs positions). At wd 1e-4 this changes
    # little against the authors' decay-everything setting; it keeps the families alike.
    paramwise_cfg=dict(custom_keys={
        'norm': dict(decay_mult=0.),
        'pos_embed': dict(decay_mult=0.),
    }))

param_scheduler = [
    dict(type='PolyLR', eta_min=0.0, power=0.9, begin=0, end=40000, by_epoch=False),
]

train_dataloader = dict(batch_size=4)
val_dataloader = dict(batch_size=1)
test_dataloader = val_dataloader
