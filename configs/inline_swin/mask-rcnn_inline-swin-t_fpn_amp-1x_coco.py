_base_ = './mask-rcnn_inline-swin-t_fpn_1x_coco.py'
# Mixed precision (fp16 autocast, dynamic loss scale). The InLine attention reduces its
# token statistics in fp32, so long sequences cannot overflow. Twice the parent's lr (2e-4),
# as the lab's mmdet-3 port (ViTTT) trains its AMP Mask R-CNN at twice the fp32 Swin recipe's.
optim_wrapper = dict(type='AmpOptimWrapper', optimizer=dict(lr=2e-4))
