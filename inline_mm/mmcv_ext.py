"""A stand-in for mmcv's compiled extension ``mmcv._ext``, backed by ``torchvision.ops``.

mmcv-lite is mmcv without its C++/CUDA extension.  mmcv's Python op wrappers
(``mmcv.ops.nms``, ``mmcv.ops.RoIAlign`` ...) call functions of ``mmcv._ext``; this module
provides the ones the shipped configs and tools call, with mmcv's calling convention
(keyword arguments, preallocated outputs filled in place), on CPU and CUDA:

==========================  ====================================================
``mmcv._ext`` function      implemented with
==========================  ====================================================
``nms``                     ``torchvision.ops.nms`` (``offset=0`` only)
``roi_align_forward``       ``torchvision.ops.roi_align`` (``pool_mode`` avg only)
``roi_align_backward``      ``torch.ops.torchvision._roi_align_backward``
``get_compiler_version``    a string saying that this fallback is in use
``get_compiling_cuda_version``  ditto
==========================  ====================================================

Every other name that mmcv's loader asks for exists (mmcv checks all of them when
``mmcv.ops`` is imported) but raises :class:`MissingCompiledOpError` naming the op when it
is called.  Options torchvision lacks (nms ``offset=1``, RoIAlign max pooling) raise too:
nothing here silently computes something else.

This file is loaded *as* ``mmcv._ext`` by the import hook in ``_inline_mm_mmcv_hook``, only
when no compiled ``mmcv._ext`` exists; it imports nothing of ``inline_mm`` and imports
torchvision on first use.  Set ``INLINE_MM_RECORD_OPS=/path/file`` to append the name of
every function called (how the list above was established).
"""
import os

import torch

FALLBACK_NAME = 'inline_mm torchvision fallback'
COMPILED_HINT = ("mmcv's compiled build is needed for it: run `INLINE_MM_MMCV=full make setup` "
                 "(builds mmcv 2.1.0 with its C++/CUDA ops, ~15 min on 2 cores) or install a "
                 "compiled mmcv 2.1.x into this environment (docs/get_started.md, "
                 "'Compiled mmcv'; on the onedl stack onedl-mmcv built with its ops, "
                 "'The onedl stack')")


class MissingCompiledOpError(NotImplementedError):
    """An mmcv op that only mmcv's compiled extension implements."""


def _record(name: str) -> None:
    path = os.environ.get('INLINE_MM_RECORD_OPS')
    if path:
        with open(path, 'a') as f:
            f.write(name + '\n')


def _unsupported(op: str, what: str):
    raise MissingCompiledOpError(
        f'mmcv op `{op}` with {what} is not provided by {FALLBACK_NAME} (this mmcv has no '
        f'compiled ops and torchvision has no equivalent); {COMPILED_HINT}.')


def _tv():
    import torchvision.ops  # noqa: F401  (first use only: keeps interpreter start cheap)
    return torch.ops.torchvision


def nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float, offset: int = 0):
    """Indices of the kept boxes, highest score first (mmcv's contract).

    Among exactly equal scores the greedy order decides which of two overlapping boxes
    survives.  mmcv's kernels take that order from an unstable ``scores.sort(0, descending)``,
    torchvision's from a stable one; visiting the boxes in mmcv's order (torchvision then
    sees strictly decreasing ranks) makes the kept set mmcv's, ties included.
    """
    _record('nms')
    if int(offset) != 0:
        _unsupported('nms', f'offset={offset} (box width x2 - x1 + 1)')
    if boxes.numel() == 0:
        return boxes.new_zeros(0, dtype=torch.long)
    order = scores.sort(0, descending=True)[1]
    # float32 ranks stay distinct past fp16's 2048 consecutive integers
    ranks = torch.arange(order.numel(), 0, -1, device=boxes.device, dtype=torch.float32)
    return order[_tv().nms(boxes[order].float(), ranks, float(iou_threshold))]


def roi_align_forward(input: torch.Tensor, rois: torch.Tensor, output: torch.Tensor,
                      argmax_y: torch.Tensor, argmax_x: torch.Tensor, aligned_height: int,
                      aligned_width: int, spatial_scale: float, sampling_ratio: int,
                      pool_mode: int, aligned: bool) -> None:
    """Fill ``output`` (R, C, aligned_height, aligned_width); ``pool_mode`` 1 = average."""
    _record('roi_align_forward')
    if int(pool_mode) != 1:
        _unsupported('roi_align_forward', "pool_mode='max'")
    if rois.size(0) == 0:
        return
    out = _tv().roi_align(input, rois.to(input.dtype), float(spatial_scale), int(aligned_height),
                          int(aligned_width), int(sampling_ratio), bool(aligned))
    output.copy_(out)


def roi_align_backward(grad_output: torch.Tensor, rois: torch.Tensor, argmax_y: torch.Tensor,
                       argmax_x: torch.Tensor, grad_input: torch.Tensor, aligned_height: int,
                       aligned_width: int, spatial_scale: float, sampling_ratio: int,
                       pool_mode: int, aligned: bool) -> None:
    """Accumulate into ``grad_input`` (N, C, H, W), zero-initialised by mmcv."""
    _record('roi_align_backward')
    if int(pool_mode) != 1:
        _unsupported('roi_align_backward', "pool_mode='max'")
    if rois.size(0) == 0:
        return
    n, c, h, w = grad_input.shape
    grad = _tv()._roi_align_backward(
        grad_output.contiguous(), rois.to(grad_output.dtype), float(spatial_scale),
        int(aligned_height), int(aligned_width), n, c, h, w, int(sampling_ratio), bool(aligned))
    grad_input.add_(grad)


def get_compiler_version() -> str:
    _record('get_compiler_version')
    return f'none ({FALLBACK_NAME})'


def get_compiling_cuda_version() -> str:
    _record('get_compiling_cuda_version')
    return f'none ({FALLBACK_NAME})'


def _missing_op(name: str):
    def op(*args, **kwargs):
        _record(name)
        raise MissingCompiledOpError(
            f'mmcv op `{name}` needs mmcv\'s compiled extension, which this environment does '
            f'not have: it has no compiled ops (mmcv-lite, or onedl-mmcv built with '
            f'MMCV_WITH_OPS=0) and {FALLBACK_NAME} provides only nms, '
            f'roi_align_forward and roi_align_backward. {COMPILED_HINT}.')
    op.__name__ = op.__qualname__ = name
    return op


def __getattr__(name: str):
    # mmcv's ext_loader asserts hasattr() for every op name of its 65 op modules when
    # `mmcv.ops` is imported; answer each lazily and fail only when it is called.
    if name.startswith('_'):
        raise AttributeError(name)
    return _missing_op(name)
