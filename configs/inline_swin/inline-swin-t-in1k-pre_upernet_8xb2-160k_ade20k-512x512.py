# UperNet with an InLine-Swin-T backbone (ImageNet-1k weights) on ADE20K: the model of
# ./_base_/inline-swin-t_upernet.py trained by the shared UperNet recipe
# (../_base_/upernet_8xb2-160k_ade20k-512x512.py). Every other *_upernet_* ADE20K config
# in this folder is a short child of this file.
_base_ = ['./_base_/inline-swin-t_upernet.py', '../_base_/upernet_8xb2-160k_ade20k-512x512.py']

data_preprocessor = dict(size={{_base_.crop_size}})
model = dict(data_preprocessor=data_preprocessor,
             decode_head=dict(num_classes=150), auxiliary_head=dict(num_classes=150))
# No decay on the relative position bias tables of the softmax blocks either (the recipe
# exempts the norms): they set positional preferences rather than capacity (Swin recipe).
optim_wrapper = dict(paramwise_cfg=dict(custom_keys={
    'relative_position_bias_table': dict(decay_mult=0.),
}))
