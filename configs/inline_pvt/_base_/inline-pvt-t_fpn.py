# InLine-PVT-T (all blocks InLine, global)
# as every COCO detection config of this folder builds it (Mask R-CNN and Cascade Mask
# R-CNN, 1x and 3x; the AMP configs are their children): backbone and neck, and the
# no-decay keys of its own parameters; not the drop path, which depends on the schedule. A
# config takes them as
#   model = dict(_base_.inline_model,
#                backbone=dict(_base_.inline_model.backbone, drop_path_rate=...))
#   optim_wrapper = {{_base_.inline_optim_wrapper}}
# beside its recipe in `_base_`: mmengine merges no two bases that set the same key, so a
# fragment cannot set `model` itself. The other variants' fragments are children of this one.
inline_model = dict(
    backbone=dict(
        _delete_=True,
        type='InLinePVT',
        arch='tiny',
        out_indices=(0, 1, 2, 3),
        with_cp=False,
        # Official ImageNet weights: downloaded once into the weights cache (checkpoints/README.md).
        init_cfg=dict(type='Pretrained', checkpoint='inline://pvt_t')),
    neck=dict(in_channels=[64, 128, 320, 512]))
# The lab's PVT detector optimiser (Agent-PVT Mask R-CNN): AdamW lr 2e-4, weight decay 1e-4
# on every parameter (no norm or position-table exemption), in place of the Swin one of the
# recipe base; the AMP children keep it.
inline_optim_wrapper = dict(
    optimizer=dict(lr=2e-4, weight_decay=1e-4),
    paramwise_cfg=dict(custom_keys=dict(_delete_=True)))
