# RetinaNet + FPN, InLine-PVT-S on COCO, 1x (12 epochs), as mmdet's RetinaNet PVT-S but on
# the InLine 1x recipe. RetinaNet's FPN starts at stride 8 (P3-P7), so the backbone's
# stride-4 map is no output (its norm would get no gradient, which DDP refuses).
_base_ = '../_base_/retinanet_fpn_1x_coco.py'
model = dict(
    backbone=dict(
        _delete_=True,
        type='InLinePVT',
        arch='small',
        drop_path_rate=0.1,  # as in its ImageNet recipe
        out_indices=(1, 2, 3),
        with_cp=False,
        # Official ImageNet weights: downloaded once into the weights cache (checkpoints/README.md).
        init_cfg=dict(type='Pretrained', checkpoint='inline://pvt_s')),
    neck=dict(in_channels=[128, 320, 512], start_level=0, add_extra_convs='on_input'))
# No decay on the absolute position tables either (the recipe exempts the norms): decay
# would only shrink the positional signal learned on ImageNet.
optim_wrapper = dict(paramwise_cfg=dict(custom_keys={
    'pos_embed': dict(decay_mult=0.),
}))
