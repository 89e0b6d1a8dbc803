# Semantic FPN with an InLine-PVT-T backbone (ImageNet-1k weights) on Cityscapes: the model
# of ./_base_/inline-pvt-t_semantic-fpn.py (mmseg's base already has Cityscapes' 19
# classes) trained by the shared recipe (../_base_/fpn_4xb2-80k_cityscapes-512x1024.py).
# Testing passes each 1024x2048 image whole: every InLine block attends over all of its
# stage's map (256x512 tokens in stage 1), and the position tables are resized to it. The
# S config is a short child of this file.
_base_ = ['./_base_/inline-pvt-t_semantic-fpn.py',
          '../_base_/fpn_4xb2-80k_cityscapes-512x1024.py']

data_preprocessor = dict(size={{_base_.crop_size}})
model = dict(data_preprocessor=data_preprocessor)
