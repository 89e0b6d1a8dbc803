# Mask2Former (panoptic segmentation), InLine-Swin-T on COCO panoptic: mmdet's Mask2Former
# recipe as for instances (./mask2former_inline-swin-t_8xb2-lsj-50e_coco.py). Training and
# evaluation read COCO's panoptic PNGs with `panopticapi`, which is on GitHub only:
#   pip install git+https://github.com/cocodataset/panopticapi.git
# (without it mmdet stops as it builds the data pipeline, naming that command). The model
# itself, its training step and inference (DetInferencer) need nothing more.
_base_ = ['mmdet::mask2former/mask2former_r50_8xb2-lsj-50e_coco-panoptic.py',
          './_base_/inline-swin-t_query-heads.py']
custom_imports = dict(imports=['inline_mm', 'inline_mm.engine.enable'],
                      allow_failed_imports=False)
model = dict(
    backbone={{_base_.inline_mask2former_backbone}},
    panoptic_head=dict(in_channels=[96, 192, 384, 768]),
    init_cfg=None)
optim_wrapper = dict(paramwise_cfg=dict(custom_keys={{_base_.inline_custom_keys}}))
