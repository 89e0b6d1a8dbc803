# Ablation (injectivity; README.md here): InLine-Swin-T with normalised linear attention, exp(0.2
# x) kernel, no local residual; Mask R-CNN 1x on COCO. Starts from InLine-Swin-T's ImageNet-1K
# file (it holds every parameter of this variant; its local-residual predictor `residual.*`,
# unused here, is skipped and logged). No weights exist for this variant, and its numbers do not
# compare with the paper's ImageNet ablations. From scratch: --cfg-options
# model.backbone.init_cfg=None
_base_ = '../inline_swin/mask-rcnn_inline-swin-t_fpn_1x_coco.py'
model = dict(backbone=dict(inline_cfg=dict(
    attention='linear', kernel='exp', local_residual=False)))
