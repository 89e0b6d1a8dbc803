# FCOS + FPN (GroupNorm head), InLine-Swin-T on COCO, 1x (12 epochs). FCOS reads P3-P7, so
# the backbone's stride-4 map is no output (its norm would get no gradient).
_base_ = '../_base_/fcos_fpn_gn-head_1x_coco.py'
model = dict(
    backbone=dict(
        type='InLineSwin',
        arch='tiny',
        drop_path_rate=0.1,  # the lab's Swin-T detectors (tests/config_spec.py)
        out_indices=(1, 2, 3),
        with_cp=False,
        # Official ImageNet weights: downloaded once into the weights cache (checkpoints/README.md).
        init_cfg=dict(type='Pretrained', checkpoint='inline://swin_t')),
    neck=dict(in_channels=[192, 384, 768]))
# No decay on the relative position bias tables of the softmax blocks either (the recipe
# exempts the norms): they set positional preferences rather than capacity (Swin recipe).
optim_wrapper = dict(paramwise_cfg=dict(custom_keys={
    'relative_position_bias_table': dict(decay_mult=0.),
}))
