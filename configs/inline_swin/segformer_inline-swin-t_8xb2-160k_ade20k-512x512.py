# SegFormer's all-MLP head with an InLine-Swin-T backbone (ImageNet-1k weights) on ADE20K:
# mmseg's SegFormer recipe (../_base_/segformer_8xb2-160k_ade20k-512x512.py).
_base_ = [
    'mmseg::_base_/models/segformer_mit-b0.py',
    '../_base_/segformer_8xb2-160k_ade20k-512x512.py',
]

data_preprocessor = dict(size={{_base_.crop_size}})
model = dict(
    data_preprocessor=data_preprocessor,
    backbone=dict(
        _delete_=True,
        type='InLineSwin',
        arch='tiny',
        drop_path_rate=0.3,
        out_indices=(0, 1, 2, 3),
        with_cp=False,
        # Official ImageNet weights: downloaded once into the weights cache (checkpoints/README.md).
        init_cfg=dict(type='Pretrained', checkpoint='inline://swin_t')),
    decode_head=dict(in_channels=[96, 192, 384, 768], num_classes=150))

# No decay on the relative position bias tables of the softmax blocks either (the recipe
# exempts the norms): they set positional preferences rather than capacity (Swin recipe).
optim_wrapper = dict(paramwise_cfg=dict(custom_keys={
    'relative_position_bias_table': dict(decay_mult=0.),
}))
