# InLine-PVT-T in mmseg's Semantic FPN, as the ADE20K and Cityscapes fpn_inline-pvt-*
# configs of this folder build it: mmseg's FPN model with the InLine-PVT-T backbone
# (ImageNet-1k weights, drop path 0.1 as the lab's PVT-T Semantic FPN) and the neck's input
# widths. It inherits the model base, so a config lists it beside its recipe in `_base_`
# (mmengine merges no two bases that set the same key) and adds what the data decides (crop
# size, classes); the optimiser is the recipe's.
_base_ = 'mmseg::_base_/models/fpn_r50.py'
model = dict(
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
    neck=dict(in_channels=[64, 128, 320, 512]))
