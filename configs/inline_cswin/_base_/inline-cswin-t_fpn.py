# InLine-CSwin-T (InLine stages 1-2 global, LePE stripe attention in stages 3-4)
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
        type='InLineCSwin',
        arch='tiny',
        out_indices=(0, 1, 2, 3),
        with_cp=False,
        # Official ImageNet weights: downloaded once into the weights cache (checkpoints/README.md).
        init_cfg=dict(type='Pretrained', checkpoint='inline://cswin_t')),
    neck=dict(in_channels=[64, 128, 256, 512]))
# No inline_optim_wrapper: only the recipe's no-decay key (LayerNorms) applies. CSwin has
# no position tables to exempt; its positional term (LePE) is a depthwise conv, decayed
# like any other weight.
