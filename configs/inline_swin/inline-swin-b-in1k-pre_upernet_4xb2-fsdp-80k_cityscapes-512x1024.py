_base_ = './inline-swin-b-in1k-pre_upernet_4xb2-80k_cityscapes-512x1024.py'
# Fully sharded data parallel (mmengine's FlexibleRunner + FSDPStrategy, experimental in
# mmengine): parameters, gradients and AdamW state are split across the GPUs, one FSDP unit
# per InLine block, frozen stages as units of their own, the neck and heads by size
# (inline_mm.engine.fsdp). Same recipe otherwise. Checkpoints are whole state dicts written by
# rank 0 ('full'): tools/test.py, load_from and the ONNX export read them as any checkpoint.
runner_type = 'FlexibleRunner'
strategy = dict(
    type='FSDPStrategy',
    model_wrapper=dict(auto_wrap_policy=dict(type='inline_auto_wrap_policy'),
                       use_orig_params=True),
    state_dict_cfg='full')
