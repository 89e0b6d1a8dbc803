_base_ = './mask-rcnn_inline-deit-t_simple-fpn_ms-crop-3x_coco.py'
# Mixed precision (fp16 autocast, dynamic loss scale) with twice the learning rate, as
# in the other families' AMP detection configs (the lab's mmdet-3 port, ViTTT, trains AMP at
# twice the fp32 Swin recipe's lr). InLine reduces its token statistics in fp32.
optim_wrapper = dict(type='AmpOptimWrapper', optimizer=dict(lr=2e-4))
