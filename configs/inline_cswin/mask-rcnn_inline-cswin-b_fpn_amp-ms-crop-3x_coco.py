_base_ = './mask-rcnn_inline-cswin-b_fpn_ms-crop-3x_coco.py'
# Mixed precision; see ../inline_swin/mask-rcnn_inline-swin-t_fpn_amp-1x_coco.py.
optim_wrapper = dict(type='AmpOptimWrapper', optimizer=dict(lr=2e-4))
