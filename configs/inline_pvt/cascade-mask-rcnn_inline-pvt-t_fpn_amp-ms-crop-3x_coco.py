_base_ = './cascade-mask-rcnn_inline-pvt-t_fpn_ms-crop-3x_coco.py'
# Mixed precision, lr 2e-4 as in the Mask R-CNN AMP configs
# (mask-rcnn_inline-pvt-t_fpn_amp-1x_coco.py says why).
optim_wrapper = dict(type='AmpOptimWrapper', optimizer=dict(lr=2e-4))
