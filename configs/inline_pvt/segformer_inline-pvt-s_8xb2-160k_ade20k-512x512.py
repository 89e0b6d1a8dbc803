# SegFormer's all-MLP head with an InLine-PVT-S backbone (ImageNet-1k weights) on ADE20K:
# mmseg's SegFormer recipe (../_base_/segformer_8xb2-160k_ade20k-512x512.py). The head was
# designed for a PVT-style pyramid (SegFormer's MiT is one).
_base_ = [
    'mmseg::_base_/models/segformer_mit-b0.py',
    '../_base_/segformer_8xb2-160k_ade20k-512x512.py',
]

data_preprocessor = dict(size={{_base_.crop_size}})
model = dict(
    data_preprocessor=data_preprocessor,
    backbone=dict(
        _delete_=True,
        type='InLinePVT',
        arch='small',
        drop_path_rate=0.1,
        out_indices=(0, 1, 2, 3),
        with_cp=False,
        # Official ImageNet weights: downloaded once into the weights cache (checkpoints/README.md).
        init_cfg=dict(type='Pretrained', checkpoint='inline://pvt_s')),
    decode_head=dict(in_channels=[64, 128, 320, 512], num_classes=150))

# No decay on the position tables either (the recipe exempts the norms): they set
# positions rather than capacity, and are resized to every input.
optim_wrapper = dict(paramwise_cfg=dict(custom_keys={
    'pos_embed': dict(decay_mult=0.),
}))
