_base_ = './cascade-mask-rcnn_inline-swin-t_fpn_ms-crop-3x_coco.py'
# Mixed precision, twice the parent's lr (2e-4) as the Mask R-CNN AMP configs
# (mask-rcnn_inline-swin-t_fpn_amp-1x_coco.py says why).
optim_wrapper = dict(type='AmpOptimWrapper', optimizer=dict(lr=2e-4))
