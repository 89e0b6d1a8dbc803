# PVT-S (mmdet's PyramidVisionTransformer: spatial-reduction Softmax attention) in the
# InLine-PVT-S Mask R-CNN recipe, for the memory table beside it (benchmarks.memory); mmdet
# ships no PVT Mask R-CNN. Not a recipe of this project.
_base_ = '../../configs/inline_pvt/mask-rcnn_inline-pvt-s_fpn_1x_coco.py'
model = dict(backbone=dict(_delete_=True, type='PyramidVisionTransformer',
                           num_layers=[3, 4, 6, 3], init_cfg=None))
