_base_ = './mask-rcnn_inline-deit-b_simple-fpn_ms-crop-3x_coco.py'
# Mixed precision (fp16 autocast, dynamic loss scale) with twice the learning rate, as
# in the other families' AMP detection configs (lr 2e-4 in the mmdet-3 ports of the
# authors' sibling detectors). InLine reduces its token statistics in fp32.
optim_wrapper = dict(type='AmpOptimWrapper', optimizer=dict(lr=2e-4))
