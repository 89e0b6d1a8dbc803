# RetinaNet + FPN, InLine-PVT-S on COCO, 1x (12 epochs) single scale: the lab's Agent-PVT-S
# RetinaNet recipe (AdamW lr 1e-4, weight decay 1e-4 on every parameter, drop path 0.1).
# RetinaNet's FPN starts at stride 8 (P3-P7), so the backbone's stride-4 map is no output
# (its norm would get no gradient, which DDP refuses).
_base_ = '../_base_/retinanet_fpn_1x_coco.py'
model = dict(
    backbone=dict(
        _delete_=True,
        type='InLinePVT',
        arch='small',
        drop_path_rate=0.1,  # the lab's PVT-S RetinaNet (tests/config_spec.py)
        out_indices=(1, 2, 3),
        with_cp=False,
        # Official ImageNet weights: downloaded once into the weights cache (checkpoints/README.md).
        init_cfg=dict(type='Pretrained', checkpoint='inline://pvt_s')),
    neck=dict(in_channels=[128, 320, 512], start_level=0, add_extra_convs='on_input'))
# The lab's PVT RetinaNet optimiser: weight decay 1e-4 on every parameter (no norm or
# position-table exemption) in place of the Swin recipe's 0.05.
optim_wrapper = dict(optimizer=dict(weight_decay=1e-4),
                     paramwise_cfg=dict(custom_keys=dict(_delete_=True)))
