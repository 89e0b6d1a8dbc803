"""Compiled mmcv's RoIAlign, sigmoid focal loss and deformable attention take bf16.

mmcv's compiled kernels for these ops dispatch float, double and half only (mmcv 2.1.0:
``AT_DISPATCH_FLOATING_TYPES_AND_HALF`` in ``roi_align_cuda.cu``, ``cpu/roi_align.cpp``,
``focal_loss_cuda.cu``, ``ms_deform_attn_cuda.cu``), and mmcv registers no autocast rule for
them. Under bf16 autocast (the ``amp-bf16`` configs, or ``optim_wrapper.dtype=bfloat16``) the
features reach them in bf16: Mask R-CNN and Cascade Mask R-CNN stop at their first RoIAlign
(``"roi_align_forward_cuda_kernel" not implemented for 'BFloat16'``), RetinaNet and FCOS at the
focal loss, DINO and Mask2Former at the deformable attention, all on GPUs only (on CPU mmdet and
mmcv take their PyTorch paths for the last two).

The row ``mmcv_ops_bf16`` of :data:`PATCHES` below gives each of these op modules
(``mmcv.ops.roi_align``, ``mmcv.ops.focal_loss``, ``mmcv.ops.multi_scale_deform_attn``) an
``ext_module`` that calls the compiled one: unchanged for every dtype it has a kernel for, and
with bf16 tensors made fp32 for a call that has one, its preallocated outputs filled in fp32 and
copied back, so that the op returns bf16 as mmcv's autograd Functions expect (torchvision's
autocast rule runs its own RoIAlign in fp32 the same way). It is on only where compiled mmcv is
installed: without it the stand-in (:mod:`.mmcv_ext`) serves these functions and computes low
precision in fp32 itself.
"""
import sys

import torch

from . import BY_ENGINE, Patch

__all__ = ['PATCHES', 'OPS', 'Bf16InFp32', 'install', 'installed']

#: the dtypes compiled mmcv's kernels of :data:`OPS` have no kernel for
NO_KERNEL = (torch.bfloat16,)

#: mmcv op module -> {``mmcv._ext`` function it calls: positions of the arguments that the
#: function fills (outputs, gradients; mmcv allocates them in the input's dtype)}
OPS = {
    'mmcv.ops.roi_align': {'roi_align_forward': (2, 3, 4), 'roi_align_backward': (4,)},
    'mmcv.ops.focal_loss': {'sigmoid_focal_loss_forward': (3,),
                            'sigmoid_focal_loss_backward': (3,)},
    'mmcv.ops.multi_scale_deform_attn': {'ms_deform_attn_forward': (),
                                         'ms_deform_attn_backward': (6, 7, 8)},
}


def _in_fp32(function, filled):
    """``function`` run in fp32 when any tensor argument is bf16: tensors made fp32, the ones
    at the positions ``filled`` copied back after the call, a returned tensor made bf16."""
    def call(*args, **kwargs):
        if not any(isinstance(a, torch.Tensor) and a.dtype in NO_KERNEL
                   for a in (*args, *kwargs.values())):
            return function(*args, **kwargs)
        wide = [a.float() if isinstance(a, torch.Tensor) and a.dtype in NO_KERNEL else a
                for a in args]
        kwargs = {k: v.float() if isinstance(v, torch.Tensor) and v.dtype in NO_KERNEL else v
                  for k, v in kwargs.items()}
        out = function(*wide, **kwargs)
        for i in filled:
            if wide[i] is not args[i]:
                args[i].copy_(wide[i])
        return out.to(NO_KERNEL[0]) if isinstance(out, torch.Tensor) else out
    call.__name__ = call.__qualname__ = getattr(function, '__name__', 'call')
    return call


class Bf16InFp32:
    """An op module's view of mmcv's compiled extension: its functions of :data:`OPS` run
    bf16 in fp32 (:func:`_in_fp32`), every other name is the extension's own."""

    def __init__(self, ext, functions: dict):
        self.ext = ext
        for name, filled in functions.items():
            setattr(self, name, _in_fp32(getattr(ext, name), filled))

    def __getattr__(self, name):
        return getattr(self.ext, name)


def _needed():
    try:
        import _inline_mm_mmcv_hook as hook
    except ImportError:
        hook = None
    import importlib.util
    if importlib.util.find_spec('mmcv') is None:
        return False, 'mmcv is not installed'
    if hook is None or not hook.compiled_ext_present():
        return False, 'no compiled mmcv._ext: the stand-in computes bf16 in fp32 itself'
    return True, ("compiled mmcv's RoIAlign, focal loss and deformable attention kernels have "
                  'no bf16')


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
    Patch('mmcv_ops_bf16', "mmcv.ops' roi_align, focal_loss and multi_scale_deform_attn: their "
          'compiled kernels called in fp32 for bf16 tensors, the results in bf16',
          "bf16 autocast stops at compiled mmcv's RoIAlign (the amp-bf16 detectors), focal loss "
          "and deformable attention: 'not implemented for BFloat16'",
          'compiled mmcv 2.x', BY_ENGINE, _needed, installed, install),
)
