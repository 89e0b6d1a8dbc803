_base_ = './mask-rcnn_inline-swin-t_fpn_1x_coco.py'
# Mixed precision (fp16 autocast, dynamic loss scale). The InLine attention reduces its
# token statistics in fp32, so long sequences cannot overflow. lr 2e-4 as in the
# authors' mmdet-3 ports of their linear-attention detectors (AMP runs).
optim_wrapper = dict(type='AmpOptimWrapper', optimizer=dict(lr=2e-4))
