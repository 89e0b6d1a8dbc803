# Fully sharded data parallel (mmengine's FlexibleRunner + FSDPStrategy, experimental in
# mmengine): parameters, gradients and optimiser state are split across the GPUs, one FSDP
# unit per InLine block, frozen stages as units of their own, the neck and heads by size
# (inline_mm.engine.fsdp). Add it to a config's bases to train that config sharded.
# Checkpoints are whole state dicts written by rank 0 ('full'): tools/test.py with the parent
# config, load_from and the ONNX export read them as any checkpoint.
runner_type = 'FlexibleRunner'
strategy = dict(
    type='FSDPStrategy',
    model_wrapper=dict(auto_wrap_policy=dict(type='inline_auto_wrap_policy'),
                       use_orig_params=True),
    state_dict_cfg='full')
