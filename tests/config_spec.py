"""The shipped configs' recipe values, stated once: what tests/test_detection_configs.py
and tests/test_seg_configs.py check every config against. A recipe change is one edit
here and one in the config base that holds the value (configs/_base_/, the families'
configs/inline_<family>/_base_/ fragments and T configs).

Widths are not stated: the tests compute what a neck or head must take from the
backbone itself (conftest.out_channels)."""
from inline_mm.models.families import FAMILIES


_TYPES = dict(swin='InLineSwin', pvt='InLinePVT', cswin='InLineCSwin', deit='InLineDeiT')
_ARCHS = dict(t='tiny', s='small', m='medium', l='large', b='base')
#: Drop path rates in the COCO and in the ADE20K configs, by variant (as config names spell
#: it). The ImageNet recipes' rates, but for InLine-Swin-T's UperNet (0.3, as the sibling
#: Swin-T segmenters).
_DROP_PATH = {
    'swin-t': (0.2, 0.3), 'swin-s': (0.3, 0.3), 'swin-b': (0.5, 0.5),
    'pvt-t': (0.1, 0.1), 'pvt-s': (0.1, 0.1), 'pvt-m': (0.3, 0.1), 'pvt-l': (0.3, 0.1),
    'cswin-t': (0.2, 0.2), 'cswin-s': (0.4, 0.4), 'cswin-b': (0.5, 0.5),
    'deit-t': (0.1, 0.1), 'deit-s': (0.1, 0.1), 'deit-b': (0.1, 0.1),
}
#: Variant -> (backbone type, arch, drop path rate in the COCO configs, drop path rate in
#: the ADE20K configs).
BACKBONES = {variant: (_TYPES[variant.split('-')[0]], _ARCHS[variant[-1]], *rates)
             for variant, rates in _DROP_PATH.items()}

#: Parameter-name keys without weight decay, by backbone type: the backbone's own
#: ``no_weight_decay_keys`` (the LayerNorms everywhere, and the family's position tables and
#: class token; CSwin's LePE is a conv: decayed). tests/test_backbone_idioms.py checks that
#: they select exactly the parameters of the backbone's ``no_weight_decay()``.
NO_DECAY = {name: set(family.cls.no_weight_decay_keys) for name, family in FAMILIES.items()}

#: COCO detection (Mask R-CNN and Cascade Mask R-CNN), by the schedule in the config's
#: name: epochs, lr steps, AdamW (lr, weight decay) at 16 images per step.
DETECTION = {
    '1x': dict(max_epochs=12, milestones=[8, 11], lr=1e-4, weight_decay=0.05),
    'ms-crop-3x': dict(max_epochs=36, milestones=[27, 33], lr=1e-4, weight_decay=0.05),
}
#: The AMP detection configs double the learning rate.
DETECTION_AMP_LR = 2e-4
#: The box-target scales of the three cascade stages (first coordinate).
CASCADE_TARGET_STDS = [0.1, 0.05, 0.033]

#: ADE20K segmentation, by decode head: AdamW (lr, weight decay), linear warm-up
#: iterations (None: none), poly power, iterations, images per GPU, and the
#: (GPUs x images) = 16 per step the configs' names state.
SEGMENTATION = {
    'upernet': dict(lr=6e-5, weight_decay=0.01, warmup=1500, power=1.0, max_iters=160000,
                    batch_size=2),
    'fpn': dict(lr=2e-4, weight_decay=1e-4, warmup=None, power=0.9, max_iters=40000,
                batch_size=4),
}
#: Every ADE20K config: 150 classes, 512x512 crops.
ADE20K = dict(num_classes=150, crop_size=(512, 512))
#: InLine-DeiT's UperNet (mmseg's ViT recipe): blocks 3, 6, 9, 12 through MultiLevelNeck.
DEIT_UPERNET = dict(out_indices=(2, 5, 8, 11), final_norm=True, scales=[4, 2, 1, 0.5])
#: Every Cityscapes config: 19 classes, 512x1024 crops, whole 1024x2048 images at test time
#: (mmseg's test resize), 80k iterations, 8 images per step (4 GPUs x 2); the optimiser of
#: the head's ADE20K recipe (SEGMENTATION) with its poly decay over the 80k iterations.
CITYSCAPES = dict(num_classes=19, crop_size=(512, 1024), test_scale=(2048, 1024),
                  max_iters=80000, gpus=4, batch_size=2)
