"""Compiled mmcv's RoIAlign, sigmoid focal loss, deformable attention and NMS take bf16.

mmcv's compiled kernels for the first three dispatch float, double and half only (mmcv 2.1.0:
``AT_DISPATCH_FLOATING_TYPES_AND_HALF`` in ``roi_align_cuda.cu``, ``cpu/roi_align.cpp``,
``focal_loss_cuda.cu``, ``ms_deform_attn_cuda.cu``), its NMS reads boxes as float only
(``data_ptr<float>`` in ``nms_cuda.cu``, ``cpu/nms.cpp``), and mmcv registers no autocast rule
for them. Under bf16 autocast (the ``amp-bf16`` configs, or ``optim_wrapper.dtype=bfloat16``)
the features reach them in bf16: Mask R-CNN and Cascade Mask R-CNN stop at their first RoIAlign
(``"roi_align_forward_cuda_kernel" not implemented for 'BFloat16'``), RetinaNet and FCOS at the
focal loss, DINO and Mask2Former at the deformable attention (the last two on GPUs only: on CPU
mmdet and mmcv take their PyTorch paths), and on CPU every detector at the NMS of its boxes
(``expected scalar type Float but found BFloat16``).

The row ``mmcv_ops_bf16`` of :data:`PATCHES` below gives each of these op modules
(``mmcv.ops.roi_align``, ``mmcv.ops.focal_loss``, ``mmcv.ops.multi_scale_deform_attn``,
``mmcv.ops.nms``) an ``ext_module`` that calls the compiled one: unchanged for every dtype it
has a kernel for, and otherwise with those tensors made fp32, its preallocated outputs filled in
fp32 and copied back, so that the op returns the input's dtype as mmcv's autograd Functions
expect (torchvision's autocast rule runs its own RoIAlign in fp32 the same way). It is on only
where compiled mmcv is installed: without it the stand-in (:mod:`.mmcv_ext`) serves these
functions and computes low precision in fp32 itself.
"""
import sys

import torch

from .patch import BY_ENGINE, Patch, start_hook

__all__ = ['PATCHES', 'OPS', 'Bf16InFp32', 'install', 'installed']

BF16 = (torch.bfloat16,)

#: mmcv op module -> {``mmcv._ext`` function it calls: (positions of the arguments that the
#: function fills, as outputs or gradients that mmcv allocates in the input's dtype; the
#: dtypes the compiled function has no kernel for)}
OPS = {
    'mmcv.ops.roi_align': {'roi_align_forward': ((2, 3, 4), BF16),
                           'roi_align_backward': ((4,), BF16)},
    'mmcv.ops.focal_loss': {'sigmoid_focal_loss_forward': ((3,), BF16),
                            'sigmoid_focal_loss_backward': ((3,), BF16)},
    'mmcv.ops.multi_scale_deform_attn': {'ms_deform_attn_forward': ((), BF16),
                                         'ms_deform_attn_backward': ((6, 7, 8), BF16)},
    # its kernels read the boxes as float only, on CPU and CUDA (on CUDA autocast's fp32 exp
    # in the box decoding keeps them fp32; CPU autocast has no such rule)
    'mmcv.ops.nms': {'nms': ((), (torch.float16, torch.bfloat16))},
}


def _widened(value, dtypes):
    return value.float() if isinstance(value, torch.Tensor) and value.dtype in dtypes else value


def _in_fp32(function, filled, dtypes):
    """``function`` run in fp32 when a tensor argument has one of ``dtypes``: those tensors
    made fp32, the ones at the positions ``filled`` copied back after the call, a returned
    floating tensor given the first such argument's dtype."""
    def call(*args, **kwargs):
        low = next((a.dtype for a in (*args, *kwargs.values())
                    if isinstance(a, torch.Tensor) and a.dtype in dtypes), None)
        if low is None:
            return function(*args, **kwargs)
        wide = [_widened(a, dtypes) for a in args]
        out = function(*wide, **{k: _widened(v, dtypes) for k, v in kwargs.items()})
        for i in filled:
            if wide[i] is not args[i]:
                args[i].copy_(wide[i])
        if isinstance(out, torch.Tensor) and out.is_floating_point():
            return out.to(low)
        return out
    call.__name__ = call.__qualname__ = getattr(function, '__name__', 'call')
    return call


class Bf16InFp32:
    """An op module's view of mmcv's compiled extension: its functions of :data:`OPS` run
    the dtypes they have no kernel for in fp32 (:func:`_in_fp32`), every other name is the
    extension's own."""

    def __init__(self, ext, functions: dict):
        self.ext = ext
        for name, (filled, dtypes) in functions.items():
            setattr(self, name, _in_fp32(getattr(ext, name), filled, dtypes))

    def __getattr__(self, name):
        return getattr(self.ext, name)


def _needed():
    import importlib.util
    hook = start_hook()
    if importlib.util.find_spec('mmcv') is None:
        return False, 'mmcv is not installed'
    if hook is None or not hook.compiled_ext_present():
        return False, 'no compiled mmcv._ext: the stand-in computes bf16 in fp32 itself'
    return True, "compiled mmcv's RoIAlign, focal loss, deformable attention, NMS have no bf16"


def install():
    """Give each op module of :data:`OPS` its :class:`Bf16InFp32` view (idempotent)."""
    import importlib
    for name, functions in OPS.items():
        module = importlib.import_module(name)
        if not isinstance(module.ext_module, Bf16InFp32):
            module.ext_module = Bf16InFp32(module.ext_module, functions)


def installed() -> bool:
    return all(isinstance(getattr(sys.modules.get(name), 'ext_module', None), Bf16InFp32)
               for name in OPS)


#: the row of the patch table this module switches on (python -m inline_mm.env)
PATCHES = (
    Patch('mmcv_ops_bf16', "mmcv.ops' roi_align, focal_loss, multi_scale_deform_attn and nms: "
          'their compiled kernels called in fp32 for the dtypes they lack (bf16; nms: fp16 '
          'too), the results in the input dtype', "bf16 autocast stops at compiled mmcv's "
          "RoIAlign (the amp-bf16 detectors), focal loss and deformable attention ('not "
          "implemented for BFloat16'), on CPU at its NMS",
          'compiled mmcv 2.x', BY_ENGINE, _needed, installed, install),
)
