#!/usr/bin/env python
"""Train any inline_mm config with the stock mmdet/mmseg ``train.py`` (picked by the
config's ``default_scope``).  All flags of those scripts pass through, e.g.::

    python tools/train.py configs/inline_swin/mask-rcnn_inline-swin-t_fpn_1x_coco.py \
        --work-dir work_dirs/swin_t --amp
    python tools/train.py CONFIG --resume            # continue from the latest checkpoint
"""
from inline_mm.cli.launch import run

if __name__ == '__main__':
    run('train')
