_base_ = './mask-rcnn_inline-swin-b_fpn_1x_coco.py'
# Mixed precision, the parent's optimizer and lr unchanged; see
# mask-rcnn_inline-swin-t_fpn_amp-1x_coco.py.
optim_wrapper = dict(type='AmpOptimWrapper')
