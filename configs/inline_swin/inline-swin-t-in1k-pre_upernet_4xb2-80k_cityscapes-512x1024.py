# UperNet with an InLine-Swin-T backbone (ImageNet-1k weights) on Cityscapes: the model of
# ./_base_/inline-swin-t_upernet.py (mmseg's base already has Cityscapes' 19 classes)
# trained by the shared recipe (../_base_/upernet_4xb2-80k_cityscapes-512x1024.py). Testing
# passes each 1024x2048 image whole: the InLine stages attend over all of it (256x512
# tokens in stage 1) at linear cost. The -slide child tests in 512x1024 windows instead;
# the S and B configs are short children of this file.
_base_ = ['./_base_/inline-swin-t_upernet.py', '../_base_/upernet_4xb2-80k_cityscapes-512x1024.py']

data_preprocessor = dict(size={{_base_.crop_size}})
model = dict(data_preprocessor=data_preprocessor)
# No decay on the relative position bias tables of the softmax blocks either (the recipe
# exempts the norms): they set positional preferences rather than capacity (Swin recipe).
optim_wrapper = dict(paramwise_cfg=dict(custom_keys={
    'relative_position_bias_table': dict(decay_mult=0.),
}))
