# Semantic FPN on Cityscapes as the InLine-PVT configs train it: the UperNet Cityscapes
# setting (./upernet_4xb2-80k_cityscapes-512x1024.py: 512x1024 crops, 80k iterations, 8
# images per step as 4 GPUs x 2, whole-image 1024x2048 inference) with the optimiser of
# the ADE20K Semantic FPN recipe (./fpn_4xb4-40k_ade20k-512x512.py): AdamW lr 2e-4, weight
# decay 1e-4 on every parameter, poly decay (power 0.9) to 0, no warm-up. A family's config
# lists mmseg's FPN model base beside this file and sets the backbone and the neck's input
# widths.
_base_ = './upernet_4xb2-80k_cityscapes-512x1024.py'

optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=2e-4, betas=(0.9, 0.999), weight_decay=1e-4))
param_scheduler = [
    dict(type='PolyLR', eta_min=0.0, power=0.9, begin=0, end=80000, by_epoch=False),
]
