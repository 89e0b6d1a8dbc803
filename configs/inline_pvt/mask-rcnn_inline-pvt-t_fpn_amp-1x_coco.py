_base_ = './mask-rcnn_inline-pvt-t_fpn_1x_coco.py'
# Mixed precision with twice the parent's lr (2e-4 -> 4e-4); see
# ../inline_swin/mask-rcnn_inline-swin-t_fpn_amp-1x_coco.py.
optim_wrapper = dict(type='AmpOptimWrapper', optimizer=dict(lr=4e-4))
