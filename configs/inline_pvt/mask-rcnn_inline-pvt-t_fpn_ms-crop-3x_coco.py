_base_ = '../inline_swin/mask-rcnn_inline-swin-t_fpn_ms-crop-3x_coco.py'
# The InLine-Swin-T recipe with an InLine-PVT-T backbone (all blocks InLine, global).
model = dict(
    backbone=dict(
        _delete_=True,
        type='InLinePVT',
        arch='tiny',
        drop_path_rate=0.1,  # as in its ImageNet recipe
        out_indices=(0, 1, 2, 3),
        with_cp=False,
        init_cfg=dict(type='Pretrained', checkpoint='checkpoints/inline_pvt_t.pth')),
    neck=dict(in_channels=[64, 128, 320, 512]))
# No decay on LayerNorms (as for Swin) nor on the absolute position tables: decay
# would only shrink the positional signal learned on ImageNet, which adds no capacity
# to regularise. PVT has no relative position bias tables, hence a fresh key set.
optim_wrapper = dict(paramwise_cfg=dict(_delete_=True, custom_keys={
    'norm': dict(decay_mult=0.),
    'pos_embed': dict(decay_mult=0.),
}))
