# UperNet with an InLine-DeiT-T backbone (ImageNet-1k weights) on ADE20K: mmseg's own
# ViT/DeiT UperNet recipe (configs/vit/vit_deit-s16-ln_mln_upernet_8xb2-160k_ade20k-512x512.py):
# the outputs of blocks 3, 6, 9 and 12 (stride 16, the last through the released final
# norm) made into strides 4, 8, 16, 32 by MultiLevelNeck; 512x512 crops, 160k iterations,
# 16 images per step (8 GPUs x 2), AdamW lr 6e-5, wd 0.01, linear warm-up over 1500
# iterations, then poly decay (power 1) to 0. Every other InLine-DeiT UperNet config is
# a short child of this file.
_base_ = [
    'mmseg::_base_/models/upernet_vit-b16_ln_mln.py',
    '../_base_/ade20k_512x512.py',   # mmseg's ADE20K + the mask size check
    'mmseg::_base_/default_runtime.py',
    'mmseg::_base_/schedules/schedule_160k.py',
]
# inline_mm registers the backbones; inline_mm.engine.enable switches on its training fixes
# for mmengine (CPU DDP, checkpoint pruning and resume fallback) under any launcher.
custom_imports = dict(imports=['inline_mm', 'inline_mm.engine.enable'],
                      allow_failed_imports=False)

crop_size = (512, 512)
data_preprocessor = dict(size=crop_size)
width = 192
model = dict(
    data_preprocessor=data_preprocessor,
    pretrained=None,      # the base names a ViT-B file; the backbone's init_cfg loads ours
    backbone=dict(
        _delete_=True,
        type='InLineDeiT',
        arch='tiny',
        drop_path_rate=0.1,
        out_indices=(2, 5, 8, 11),
        final_norm=True,
        with_cp=False,
        # Official ImageNet weights: downloaded once into the weights cache (checkpoints/README.md).
        init_cfg=dict(type='Pretrained', checkpoint='inline://deit_t')),
    neck=dict(in_channels=[width] * 4, out_channels=width, scales=[4, 2, 1, 0.5]),
    decode_head=dict(in_channels=[width] * 4, num_classes=150),
    auxiliary_head=dict(in_channels=width, num_classes=150))

optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=6e-5, betas=(0.9, 0.999), weight_decay=0.01),
    # No decay on LayerNorms, the position table and the class token (mmseg's ViT
    # recipe): they set scales, offsets and positions rather than capacity, and decay
    # would only erode what ImageNet taught them.
    paramwise_cfg=dict(custom_keys={
        'norm': dict(decay_mult=0.),
        'pos_embed': dict(decay_mult=0.),
        'cls_token': dict(decay_mult=0.),
    }))

param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=1500),
    dict(type='PolyLR', eta_min=0.0, power=1.0, begin=1500, end=160000, by_epoch=False),
]

train_dataloader = dict(batch_size=2)
val_dataloader = dict(batch_size=1)
test_dataloader = val_dataloader
