_base_ = './mask-rcnn_inline-swin-t_fpn_1x_coco.py'
# Mixed precision (fp16 autocast, dynamic loss scale), the parent's recipe otherwise: the same
# optimizer and lr, as mmdet's own AMP configs (AMP changes the arithmetic, not the batch; a
# larger batch is a batch change: --auto-scale-lr). The InLine attention reduces its token
# statistics in fp32, so long sequences cannot overflow.
optim_wrapper = dict(type='AmpOptimWrapper')
