# SegFormer's all-MLP head on ADE20K as mmseg's SegFormer configs train it: the optimiser
# and schedule of the UperNet recipe (./upernet_8xb2-160k_ade20k-512x512.py: AdamW lr 6e-5,
# wd 0.01, warm-up 1500 iterations, poly decay to 0 over 160k, 16 images per step, 512x512
# crops, no decay on norms), with the head at 10x the learning rate. A family's config
# lists mmseg's SegFormer model base beside this file and sets the backbone and the head's
# input widths.
_base_ = './upernet_8xb2-160k_ade20k-512x512.py'
optim_wrapper = dict(paramwise_cfg=dict(custom_keys={
    'head': dict(lr_mult=10.),
}))
