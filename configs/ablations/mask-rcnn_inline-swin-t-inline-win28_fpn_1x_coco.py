# Ablation (window; README.md here): InLine-Swin-T with InLine blocks in 28x28 windows (no shift),
# local residual on; Mask R-CNN 1x on COCO. Starts from InLine-Swin-T's ImageNet-1K file (it holds
# every parameter of this variant). No weights exist for this variant, and its numbers do not
# compare with the paper's ImageNet ablations. From scratch: --cfg-options
# model.backbone.init_cfg=None
_base_ = '../inline_swin/mask-rcnn_inline-swin-t_fpn_1x_coco.py'
model = dict(backbone=dict(inline_cfg=dict(
    window_size=28)))
