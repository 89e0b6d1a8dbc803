# UperNet with an InLine-CSwin-T backbone (ImageNet-1k weights) on ADE20K (UperNet is the
# CSwin paper's segmenter), trained as the InLine-Swin UperNet configs train: the shared
# UperNet recipe (../_base_/upernet_8xb2-160k_ade20k-512x512.py). Every other InLine-CSwin
# UperNet config is a short child of this file.
_base_ = [
    'mmseg::_base_/models/upernet_swin.py',
    '../_base_/upernet_8xb2-160k_ade20k-512x512.py',
]

data_preprocessor = dict(size={{_base_.crop_size}})
model = dict(
    data_preprocessor=data_preprocessor,
    backbone=dict(
        _delete_=True,
        type='InLineCSwin',
        arch='tiny',
        drop_path_rate=0.3,  # the Swin-T UperNet rate (tests/config_spec.py)
        out_indices=(0, 1, 2, 3),
        with_cp=False,
        # Official ImageNet weights: downloaded once into the weights cache (checkpoints/README.md).
        init_cfg=dict(type='Pretrained', checkpoint='inline://cswin_t')),
    decode_head=dict(in_channels=[64, 128, 256, 512], num_classes=150),
    auxiliary_head=dict(in_channels=256, num_classes=150))
# Only the recipe's no-decay key (LayerNorms): CSwin has no position tables to exempt, its
# positional term (LePE) is a depthwise conv, decayed like any other weight.
