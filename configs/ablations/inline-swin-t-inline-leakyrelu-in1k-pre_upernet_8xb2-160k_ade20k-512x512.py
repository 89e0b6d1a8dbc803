# Ablation (kernel; README.md here): InLine-Swin-T with InLine attention, LeakyReLU kernel, local
# residual on; UperNet 160k on ADE20K. Starts from InLine-Swin-T's ImageNet-1K file (it holds
# every parameter of this variant). No weights exist for this variant, and its numbers do not
# compare with the paper's ImageNet ablations. From scratch: --cfg-options
# model.backbone.init_cfg=None
_base_ = '../inline_swin/inline-swin-t-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py'
model = dict(backbone=dict(inline_cfg=dict(
    kernel='leakyrelu')))
