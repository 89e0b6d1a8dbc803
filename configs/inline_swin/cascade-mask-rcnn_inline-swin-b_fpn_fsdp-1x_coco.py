_base_ = './cascade-mask-rcnn_inline-swin-b_fpn_1x_coco.py'
# Fully sharded data parallel; see inline-swin-b-in1k-pre_upernet_4xb2-fsdp-80k_cityscapes-512x1024.py.
runner_type = 'FlexibleRunner'
strategy = dict(
    type='FSDPStrategy',
    model_wrapper=dict(auto_wrap_policy=dict(type='inline_auto_wrap_policy'),
                       use_orig_params=True),
    state_dict_cfg='full')
