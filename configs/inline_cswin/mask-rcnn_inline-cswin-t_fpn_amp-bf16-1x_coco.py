_base_ = './mask-rcnn_inline-cswin-t_fpn_amp-1x_coco.py'
# bf16 autocast instead of fp16 (the only change to the AMP config above): bf16 keeps
# fp32's exponent range, so activations and gradients cannot overflow to inf/NaN as in fp16,
# at a coarser mantissa. Needs a GPU with bf16 (Ampere or newer; mmengine says so otherwise).
# The dynamic loss scale stays: bf16 does not need it, and it still skips a step whose
# gradients are not finite.
optim_wrapper = dict(dtype='bfloat16')
