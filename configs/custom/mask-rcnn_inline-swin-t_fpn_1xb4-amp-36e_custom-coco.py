# The Mask R-CNN own-data template with mixed precision (fp16 autocast, dynamic loss scale):
# about half the memory and faster steps on a GPU (AMP needs one). The InLine attention
# reduces its token statistics in fp32, so long sequences cannot overflow. Same as
# `tools/train.py <template> --amp`; a copy next to your own copy: point _base_ at it.
_base_ = './mask-rcnn_inline-swin-t_fpn_1xb4-36e_custom-coco.py'
optim_wrapper = dict(type='AmpOptimWrapper', loss_scale='dynamic')
