# UperNet with an InLine-CSwin-T backbone (ImageNet-1k weights) on ADE20K (UperNet is the
# CSwin paper's segmenter), trained as the InLine-Swin UperNet configs train: 512x512
# crops, 160k iterations, 16 images per step (8 GPUs x 2), AdamW lr 6e-5, wd 0.01, linear
# warm-up over 1500 iterations, then poly decay (power 1) to 0. Every other InLine-CSwin
# UperNet config is a short child of this file.
_base_ = [
    'mmseg::_base_/models/upernet_swin.py',
    '../_base_/ade20k_512x512.py',   # mmseg's ADE20K + the mask checks
    'mmseg::_base_/default_runtime.py',
    'mmseg::_base_/schedules/schedule_160k.py',
]
# inline_mm registers the backbones; inline_mm.engine.enable switches on its training fixes
# for mmengine (CPU DDP, checkpoint pruning and resume fallback) under any launcher.
custom_imports = dict(imports=['inline_mm', 'inline_mm.engine.enable'],
                      allow_failed_imports=False)

crop_size = (512, 512)
data_preprocessor = dict(size=crop_size)
# The heads keep the base's SyncBN; with one process mmengine turns it into plain BN (see
# ../inline_swin/inline-swin-t-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py).
model = dict(
    data_preprocessor=data_preprocessor,
    backbone=dict(
        _delete_=True,
        type='InLineCSwin',
        arch='tiny',
        drop_path_rate=0.2,  # as in its ImageNet recipe
        out_indices=(0, 1, 2, 3),
        with_cp=False,
        # Official ImageNet weights: downloaded once into the weights cache (checkpoints/README.md).
        init_cfg=dict(type='Pretrained', checkpoint='inline://cswin_t')),
    decode_head=dict(in_channels=[64, 128, 256, 512], num_classes=150),
    auxiliary_head=dict(in_channels=256, num_classes=150))

optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=6e-5, betas=(0.9, 0.999), weight_decay=0.01),
    # No decay on LayerNorm gains/biases: they set scales and offsets rather than
    # capacity. CSwin has no position tables to exempt: its positional term (LePE) is a
    # depthwise conv, decayed like any other weight.
    paramwise_cfg=dict(custom_keys={
        'norm': dict(decay_mult=0.),
    }))

param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=1500),
    dict(type='PolyLR', eta_min=0.0, power=1.0, begin=1500, end=160000, by_epoch=False),
]

train_dataloader = dict(batch_size=2)
val_dataloader = dict(batch_size=1)
test_dataloader = val_dataloader
