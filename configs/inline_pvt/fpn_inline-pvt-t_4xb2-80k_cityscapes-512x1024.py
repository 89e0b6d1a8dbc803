# Semantic FPN with an InLine-PVT-T backbone (ImageNet-1k weights) on Cityscapes: the
# shared recipe (../_base_/fpn_4xb2-80k_cityscapes-512x1024.py). Testing passes each
# 1024x2048 image whole: every InLine block attends over all of its stage's map (256x512
# tokens in stage 1), and the position tables are resized to it. The S config is a short
# child of this file.
_base_ = [
    'mmseg::_base_/models/fpn_r50.py',
    '../_base_/fpn_4xb2-80k_cityscapes-512x1024.py',
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
    decode_head=dict(num_classes=19))

# No decay on the position tables either (the recipe exempts the norms): they set
# positions rather than capacity, and are resized to every input.
optim_wrapper = dict(paramwise_cfg=dict(custom_keys={
    'pos_embed': dict(decay_mult=0.),
}))
