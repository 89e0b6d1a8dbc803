# InLine-Swin-T as the query-based heads of this folder train it (DINO, Mask2Former): their
# recipes run the backbone at 0.1x the learning rate; here its LayerNorms and the
# relative position bias tables of its Softmax blocks also get no weight decay, as
# mmdet's Swin Mask2Former does for Swin. A config takes the keys as
#   optim_wrapper = dict(paramwise_cfg=dict(custom_keys={{_base_.inline_custom_keys}}))
# beside its recipe in `_base_` (mmengine merges no two bases that set the same key).
# mmengine applies the longest key that is part of a parameter's name, so every
# backbone key repeats the 0.1x learning rate.
_depths = (2, 2, 6, 2)
_backbone_no_decay = dict(lr_mult=0.1, decay_mult=0.)
inline_custom_keys = {
    'backbone': dict(lr_mult=0.1, decay_mult=1.),
    'backbone.patch_embed.norm': _backbone_no_decay,
    'backbone.norm': _backbone_no_decay,                 # the output norms norm0..norm3
    'relative_position_bias_table': _backbone_no_decay,
}
inline_custom_keys.update({
    f'backbone.layers.{stage}.blocks.{block}.norm': _backbone_no_decay
    for stage, depth in enumerate(_depths) for block in range(depth)})
inline_custom_keys.update({
    f'backbone.layers.{stage}.downsample.norm': _backbone_no_decay
    for stage in range(len(_depths) - 1)})
# The backbone of the Mask2Former configs (Swin-T's Mask2Former settings in mmdet/mmseg:
# drop path 0.3, all four stages into the pixel decoder); the DINO config takes it with
# its own drop path and strides.
inline_mask2former_backbone = dict(
    _delete_=True,
    type='InLineSwin',
    arch='tiny',
    drop_path_rate=0.3,
    out_indices=(0, 1, 2, 3),
    with_cp=False,
    # Official ImageNet weights: downloaded once into the weights cache (checkpoints/README.md).
    init_cfg=dict(type='Pretrained', checkpoint='inline://swin_t'))
