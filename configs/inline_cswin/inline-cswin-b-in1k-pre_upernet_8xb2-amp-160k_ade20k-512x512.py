_base_ = './inline-cswin-b-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py'
# Mixed precision (fp16 autocast, dynamic loss scale), same recipe otherwise. The InLine
# attention reduces its token statistics in fp32, so long sequences cannot overflow.
optim_wrapper = dict(type='AmpOptimWrapper', loss_scale='dynamic')
