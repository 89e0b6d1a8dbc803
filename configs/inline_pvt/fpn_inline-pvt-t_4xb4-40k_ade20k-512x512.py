# Semantic FPN with an InLine-PVT-T backbone (ImageNet-1k weights) on ADE20K: the shared
# Semantic FPN recipe (../_base_/fpn_4xb4-40k_ade20k-512x512.py). Every other
# fpn_inline-pvt-* config in this folder is a short child of this file.
_base_ = [
    'mmseg::_base_/models/fpn_r50.py',
    '../_base_/fpn_4xb4-40k_ade20k-512x512.py',
]

data_preprocessor = dict(size={{_base_.crop_size}})
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

# No decay on the position tables either (the recipe exempts the norms): they set
# positions rather than capacity, and are resized to every input, so shrinking them only
# blurs positions.
optim_wrapper = dict(paramwise_cfg=dict(custom_keys={
    'pos_embed': dict(decay_mult=0.),
}))
