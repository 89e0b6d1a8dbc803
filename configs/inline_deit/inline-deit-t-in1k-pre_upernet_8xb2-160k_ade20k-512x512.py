# UperNet with an InLine-DeiT-T backbone (ImageNet-1k weights) on ADE20K: mmseg's own
# ViT/DeiT UperNet recipe (configs/vit/vit_deit-s16-ln_mln_upernet_8xb2-160k_ade20k-512x512.py):
# the outputs of blocks 3, 6, 9 and 12 (stride 16, the last through the released final
# norm) made into strides 4, 8, 16, 32 by MultiLevelNeck, trained by the shared UperNet
# recipe (../_base_/upernet_8xb2-160k_ade20k-512x512.py). Every other InLine-DeiT UperNet
# config is a short child of this file.
_base_ = [
    'mmseg::_base_/models/upernet_vit-b16_ln_mln.py',
    '../_base_/upernet_8xb2-160k_ade20k-512x512.py',
]

data_preprocessor = dict(size={{_base_.crop_size}})
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

# No decay on the position table and the class token either (the recipe exempts the
# norms; mmseg's ViT recipe): they set positions rather than capacity, and decay would
# only erode what ImageNet taught them.
optim_wrapper = dict(paramwise_cfg=dict(custom_keys={
    'pos_embed': dict(decay_mult=0.),
    'cls_token': dict(decay_mult=0.),
}))
