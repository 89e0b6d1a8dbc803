# mmseg's own Swin-T UperNet (shifted 7x7 Softmax windows), for the memory table beside the
# InLine recipes (benchmarks.memory); not a recipe of this project.
_base_ = 'mmseg::swin/swin-tiny-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py'
