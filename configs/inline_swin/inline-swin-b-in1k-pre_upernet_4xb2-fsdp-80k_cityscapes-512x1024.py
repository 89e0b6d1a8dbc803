# The InLine-Swin-B Cityscapes recipe, fully sharded (../_base_/fsdp.py); same recipe otherwise.
_base_ = ['./inline-swin-b-in1k-pre_upernet_4xb2-80k_cityscapes-512x1024.py', '../_base_/fsdp.py']
