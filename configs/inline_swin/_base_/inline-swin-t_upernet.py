# InLine-Swin-T in mmseg's UperNet, as the ADE20K and Cityscapes UperNet configs of this
# folder build it: mmseg's Swin UperNet model with the InLine-Swin-T backbone (ImageNet-1k
# weights; drop path 0.3 as the lab's Agent-Swin-T UperNet) and the heads' input widths.
# It inherits the model base, so a config lists it beside its recipe in `_base_` (mmengine
# merges no two bases that set the same key) and adds what the data decides (crop size,
# classes) and the no-decay keys (the optimiser is the recipe's).
_base_ = 'mmseg::_base_/models/upernet_swin.py'
model = dict(
    backbone=dict(
        _delete_=True,
        type='InLineSwin',
        arch='tiny',
        drop_path_rate=0.3,
        out_indices=(0, 1, 2, 3),
        with_cp=False,
        # Official ImageNet weights: downloaded once into the weights cache (checkpoints/README.md).
        init_cfg=dict(type='Pretrained', checkpoint='inline://swin_t')),
    decode_head=dict(in_channels=[96, 192, 384, 768]),
    auxiliary_head=dict(in_channels=384))
