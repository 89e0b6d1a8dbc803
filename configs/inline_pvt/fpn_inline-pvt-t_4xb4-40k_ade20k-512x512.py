# Semantic FPN with an InLine-PVT-T backbone (ImageNet-1k weights) on ADE20K: the model of
# ./_base_/inline-pvt-t_semantic-fpn.py trained by the shared Semantic FPN recipe
# (../_base_/fpn_4xb4-40k_ade20k-512x512.py). Every other fpn_inline-pvt-* ADE20K config
# in this folder is a short child of this file.
_base_ = ['./_base_/inline-pvt-t_semantic-fpn.py', '../_base_/fpn_4xb4-40k_ade20k-512x512.py']

data_preprocessor = dict(size={{_base_.crop_size}})
model = dict(data_preprocessor=data_preprocessor, decode_head=dict(num_classes=150))
