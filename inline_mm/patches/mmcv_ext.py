"""A stand-in for mmcv's compiled extension ``mmcv._ext``: ``torchvision.ops`` and plain PyTorch.

mmcv-lite is mmcv without its C++/CUDA extension.  mmcv's Python op wrappers
(``mmcv.ops.nms``, ``mmcv.ops.RoIAlign`` ...) call functions of ``mmcv._ext``; this module
provides the ones the shipped configs and tools call, with mmcv's calling convention
(keyword arguments, preallocated outputs filled in place), on CPU and CUDA:

=================================  =============================================
``mmcv._ext`` function             implemented with
=================================  =============================================
``nms``                            ``torchvision.ops.nms`` (``offset=0`` only)
``roi_align_forward``              ``torchvision.ops.roi_align`` (``pool_mode`` avg only)
``roi_align_backward``             ``torch.ops.torchvision._roi_align_backward``
``sigmoid_focal_loss_forward``     log-sigmoid form of the kernel's per-element loss
``sigmoid_focal_loss_backward``    its closed-form derivative (the kernel's formula)
``ms_deform_attn_forward``         ``F.grid_sample`` per level (bilinear, zero padding,
                                   ``align_corners=False``, as the CUDA kernel samples)
``ms_deform_attn_backward``        autograd through the same grid-sample formulation
``get_compiler_version``           a string saying that this fallback is in use
``get_compiling_cuda_version``     ditto
=================================  =============================================

mmcv's own Python falls back to PyTorch on CPU for the focal loss (mmdet's
``py_sigmoid_focal_loss``) and the deformable attention (mmcv's
``multi_scale_deformable_attn_pytorch``) and calls ``mmcv._ext`` for them only on CUDA
tensors, where these functions answer it; they run on any device.

**Low precision.** Each served function takes fp16 and bf16 tensors, forward and backward, on
any device, and fills (or returns) them in their dtype, computing in fp32 (:func:`_compute`):
torchvision has no bf16 RoIAlign kernel on CPU or CUDA (``roi_align_backward_kernel "not
implemented for 'BFloat16'"`` in the first backward of Mask R-CNN under bf16 autocast), and its
own autocast rule runs ``roi_align``'s forward in fp32 anyway; RoIs in fp32 keep their
coordinates (bf16 spaces them 4 px apart at 800 px); the loss and the sampled sums keep fp32's
precision. fp32 and fp64 run in their own dtype, as before.

Every other name that mmcv's loader asks for exists (mmcv checks all of them when
``mmcv.ops`` is imported) but raises :class:`MissingCompiledOpError` naming the op when it
is called.  Options torchvision lacks (nms ``offset=1``, RoIAlign max pooling) raise too:
nothing here silently computes something else.

This file is loaded *as* ``mmcv._ext`` by the import hook in ``_inline_mm_mmcv_hook``, only
when no compiled ``mmcv._ext`` exists; it imports nothing of ``inline_mm`` and imports
torchvision on first use.  Set ``INLINE_MM_RECORD_OPS=/path/file`` to append the name of
every function called (how the list above was established).
"""
import functools
import os

import torch
import torch.nn.functional as F

FALLBACK_NAME = 'inline_mm torchvision fallback'
COMPILED_HINT = ("mmcv's compiled build is needed for it: run `INLINE_MM_MMCV=full make setup` "
                 "(builds mmcv 2.1.0 with its C++/CUDA ops, ~15 min on 2 cores) or install a "
                 "compiled mmcv 2.1.x into this environment (docs/get_started.md, "
                 "'Compiled mmcv'; on the onedl stack onedl-mmcv built with its ops, "
                 "'The onedl stack')")


#: the ``mmcv._ext`` functions answered here (every other one raises when called)
SERVED = ('nms', 'roi_align_forward', 'roi_align_backward', 'sigmoid_focal_loss_forward',
          'sigmoid_focal_loss_backward', 'ms_deform_attn_forward', 'ms_deform_attn_backward',
          'get_compiler_version', 'get_compiling_cuda_version')


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


#: the dtypes computed in fp32 here (the tensors given are filled or returned in their own)
LOW_PRECISION = (torch.float16, torch.bfloat16)


def _compute(*tensors: torch.Tensor):
    """``tensors`` in the dtype to compute in: fp32 for fp16 and bf16, their own otherwise."""
    return [t.float() if t.dtype in LOW_PRECISION else t for t in tensors]


def _roi_align_has_work(name: str, rois: torch.Tensor, pool_mode: int) -> bool:
    """Record the call and refuse max pooling; False when there is no RoI."""
    _record(name)
    if int(pool_mode) != 1:
        _unsupported(name, "pool_mode='max'")
    return rois.size(0) > 0


def roi_align_forward(input: torch.Tensor, rois: torch.Tensor, output: torch.Tensor,
                      argmax_y: torch.Tensor, argmax_x: torch.Tensor, aligned_height: int,
                      aligned_width: int, spatial_scale: float, sampling_ratio: int,
                      pool_mode: int, aligned: bool) -> None:
    """Fill ``output`` (R, C, aligned_height, aligned_width); ``pool_mode`` 1 = average."""
    if not _roi_align_has_work('roi_align_forward', rois, pool_mode):
        return
    input, rois = _compute(input, rois)
    out = _tv().roi_align(input, rois.to(input.dtype), float(spatial_scale), int(aligned_height),
                          int(aligned_width), int(sampling_ratio), bool(aligned))
    output.copy_(out)


def roi_align_backward(grad_output: torch.Tensor, rois: torch.Tensor, argmax_y: torch.Tensor,
                       argmax_x: torch.Tensor, grad_input: torch.Tensor, aligned_height: int,
                       aligned_width: int, spatial_scale: float, sampling_ratio: int,
                       pool_mode: int, aligned: bool) -> None:
    """Accumulate into ``grad_input`` (N, C, H, W), zero-initialised by mmcv."""
    if not _roi_align_has_work('roi_align_backward', rois, pool_mode):
        return
    n, c, h, w = grad_input.shape
    grad_output, rois = _compute(grad_output, rois)
    grad = _tv()._roi_align_backward(
        grad_output.contiguous(), rois.to(grad_output.dtype), float(spatial_scale),
        int(aligned_height), int(aligned_width), n, c, h, w, int(sampling_ratio), bool(aligned))
    grad_input.add_(grad)


# ------------------------------------------------------------------ sigmoid focal loss
def _focal_terms(input: torch.Tensor, target: torch.Tensor, weight: torch.Tensor):
    """Per element (n, c): whether c is the target class of row n, p = sigmoid(x),
    1 - p, log p, log(1 - p), and the class weight of the row's target (None without)."""
    if input.dim() != 2 or target.shape != input.shape[:1]:
        raise ValueError(f'sigmoid focal loss: input (N, C) and target (N,) expected, got '
                         f'{tuple(input.shape)} and {tuple(target.shape)}')
    num_classes = input.size(1)
    is_target = target[:, None] == torch.arange(num_classes, device=input.device)
    # log-sigmoid, not log(max(p, FLT_MIN)) as the kernel: equal where the kernel's p is
    # not clamped (|x| < 87), exact beyond, as mmdet's py_sigmoid_focal_loss.
    log_p, log_1mp = F.logsigmoid(input), F.logsigmoid(-input)
    scale = None
    if weight.numel():
        if bool((target >= num_classes).any()):
            raise ValueError('sigmoid focal loss: a class weight with a background target '
                             f'(= {num_classes}, no class): mmcv\'s kernel reads weight[target] '
                             'past the end there; weight the loss after the call instead')
        scale = weight[target][:, None]
    return is_target, log_p.exp(), log_1mp.exp(), log_p, log_1mp, scale


def sigmoid_focal_loss_forward(input: torch.Tensor, target: torch.Tensor,
                               weight: torch.Tensor, output: torch.Tensor, gamma: float = 2.,
                               alpha: float = .25) -> None:
    """Fill ``output`` (N, C) with the unreduced focal loss of logits ``input`` (N, C) for
    class indices ``target`` (N,) (``C``: background): ``-alpha (1-p)^gamma log p`` at the
    target class, ``-(1-alpha) p^gamma log(1-p)`` elsewhere, times ``weight[target]`` when
    ``weight`` (C,) is not empty."""
    _record('sigmoid_focal_loss_forward')
    is_target, p, q, log_p, log_1mp, scale = _focal_terms(*_compute(input), target,
                                                          *_compute(weight))
    loss = torch.where(is_target, -alpha * q.pow(gamma) * log_p,
                       -(1 - alpha) * p.pow(gamma) * log_1mp)
    output.copy_(loss if scale is None else loss * scale)


def sigmoid_focal_loss_backward(input: torch.Tensor, target: torch.Tensor,
                                weight: torch.Tensor, grad_input: torch.Tensor,
                                gamma: float = 2., alpha: float = .25) -> None:
    """Fill ``grad_input`` (N, C) with the derivative of each element of the forward's loss
    by its logit (mmcv scales it by the incoming gradient afterwards)."""
    _record('sigmoid_focal_loss_backward')
    is_target, p, q, log_p, log_1mp, scale = _focal_terms(*_compute(input), target,
                                                          *_compute(weight))
    grad = torch.where(is_target, -alpha * q.pow(gamma) * (q - gamma * p * log_p),
                       -(1 - alpha) * p.pow(gamma) * (gamma * q * log_1mp - p))
    grad_input.copy_(grad if scale is None else grad * scale)


# ------------------------------------------------------- multi-scale deformable attention
def _deform_attn(value: torch.Tensor, shapes, starts, sampling_locations: torch.Tensor,
                 attention_weights: torch.Tensor) -> torch.Tensor:
    """Multi-scale deformable attention as ``F.grid_sample`` per level.

    value (B, S, M, D) of every level's map flattened row-major from ``starts``;
    sampling_locations (B, Q, M, L, P, 2) as (x, y) in [0, 1] of each level's map;
    attention_weights (B, Q, M, L, P). Returns (B, Q, M * D). A location samples the map
    bilinearly, pixel centres at (i + 0.5) / size, zero outside: the CUDA kernel's
    ``h * loc_y - 0.5`` convention, which is ``grid_sample(align_corners=False)``.
    The weighted sum runs level by level, so no (B*M, D, Q, L*P) stack is held.
    """
    b, _, m, d = value.shape
    q = sampling_locations.shape[1]
    grids = (2 * sampling_locations - 1).transpose(1, 2).flatten(0, 1)    # (B*M, Q, L, P, 2)
    weights = attention_weights.transpose(1, 2).flatten(0, 1)            # (B*M, Q, L, P)
    out = value.new_zeros(b * m, d, q)
    for level, ((h, w), start) in enumerate(zip(shapes, starts)):
        # (B, h*w, M, D) -> (B*M, D, h, w)
        v = value[:, start:start + h * w].permute(0, 2, 3, 1).reshape(b * m, d, h, w)
        sampled = F.grid_sample(v, grids[:, :, level], mode='bilinear', padding_mode='zeros',
                                align_corners=False)                     # (B*M, D, Q, P)
        out = out + (sampled * weights[:, None, :, level]).sum(-1)
    return out.view(b, m * d, q).transpose(1, 2).contiguous()


def _levels(value_spatial_shapes: torch.Tensor, value_level_start_index: torch.Tensor):
    # Python sizes for the per-level views (one host read each; the kernel reads them on
    # the device).
    return [tuple(s) for s in value_spatial_shapes.tolist()], value_level_start_index.tolist()


def ms_deform_attn_forward(value: torch.Tensor, value_spatial_shapes: torch.Tensor,
                           value_level_start_index: torch.Tensor,
                           sampling_locations: torch.Tensor, attention_weights: torch.Tensor,
                           im2col_step: int = 64) -> torch.Tensor:
    """Returns (B, Q, M * D) (mmcv's contract; ``im2col_step`` only chunks the kernel's
    work over the batch, which the grid-sample form does not need)."""
    _record('ms_deform_attn_forward')
    shapes, starts = _levels(value_spatial_shapes, value_level_start_index)
    out = _deform_attn(*_compute(value), shapes, starts,
                       *_compute(sampling_locations, attention_weights))
    return out.to(value.dtype)


def ms_deform_attn_backward(value: torch.Tensor, value_spatial_shapes: torch.Tensor,
                            value_level_start_index: torch.Tensor,
                            sampling_locations: torch.Tensor, attention_weights: torch.Tensor,
                            grad_output: torch.Tensor, grad_value: torch.Tensor,
                            grad_sampling_loc: torch.Tensor, grad_attn_weight: torch.Tensor,
                            im2col_step: int = 64) -> None:
    """Accumulate the gradients of the forward's inputs into ``grad_value``,
    ``grad_sampling_loc`` and ``grad_attn_weight`` (zero-initialised by mmcv)."""
    _record('ms_deform_attn_backward')
    shapes, starts = _levels(value_spatial_shapes, value_level_start_index)
    with torch.enable_grad():
        inputs = [t.detach().requires_grad_() for t in
                  _compute(value, sampling_locations, attention_weights)]
        out = _deform_attn(inputs[0], shapes, starts, *inputs[1:])
        grads = torch.autograd.grad(out, inputs, *_compute(grad_output))
    for buffer, grad in zip((grad_value, grad_sampling_loc, grad_attn_weight), grads):
        buffer.add_(grad)


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
            f'MMCV_WITH_OPS=0) and {FALLBACK_NAME} provides only '
            f'{", ".join(n for n in SERVED if not n.startswith("get_"))}. {COMPILED_HINT}.')
    op.__name__ = op.__qualname__ = name
    return op


#: mmcv's op modules whose forward has no PyTorch path on any device and calls only
#: functions this file does not serve (module -> its classes, the ``mmcv._ext`` functions it
#: asks mmcv's loader for): building one raises (see :func:`refuse_unserved`), so that a head
#: that needs one fails as its model is built, not at the first iteration. Subclasses
#: (``DeformConv2dPack`` = ``DCN``, ``ModulatedDeformConv2dPack`` = ``DCNv2``,
#: ``DeformRoIPoolPack`` ...) are refused with their base.
UNSERVED_MODULES = {
    'mmcv.ops.deform_conv': (('DeformConv2d',), (
        'deform_conv_forward', 'deform_conv_backward_input', 'deform_conv_backward_parameters')),
    'mmcv.ops.modulated_deform_conv': (('ModulatedDeformConv2d',), (
        'modulated_deform_conv_forward', 'modulated_deform_conv_backward')),
    'mmcv.ops.carafe': (('CARAFENaive', 'CARAFE', 'CARAFEPack'), (
        'carafe_naive_forward', 'carafe_naive_backward', 'carafe_forward', 'carafe_backward')),
    'mmcv.ops.psa_mask': (('PSAMask',), ('psamask_forward', 'psamask_backward')),
    'mmcv.ops.deform_roi_pool': (('DeformRoIPool',), (
        'deform_roi_pool_forward', 'deform_roi_pool_backward')),
    'mmcv.ops.roi_pool': (('RoIPool',), ('roi_pool_forward', 'roi_pool_backward')),
}


def _refusing_init(init, functions, where: str):
    @functools.wraps(init)
    def refuse(self, *args, **kwargs):
        raise MissingCompiledOpError(
            f'{type(self).__name__} ({where}) runs only on mmcv\'s compiled extension '
            f'({", ".join(functions)}), which this environment does not have: it has no '
            f'compiled ops and {FALLBACK_NAME} does not provide them. Refused as the model '
            f'is built rather than at its first iteration; {COMPILED_HINT}.')
    refuse._inline_mm_refused = True
    return refuse


def refuse_unserved() -> list:
    """Make the classes of :data:`UNSERVED_MODULES` raise :class:`MissingCompiledOpError`
    when built (idempotent); the hook calls it once ``mmcv.ops`` has been imported with
    this file as ``mmcv._ext``. Returns the classes refused by this call."""
    import importlib
    refused = []
    for module_name, (class_names, functions) in UNSERVED_MODULES.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError:                 # another mmcv without this op module
            continue
        for class_name in class_names:
            cls = getattr(module, class_name, None)
            if cls is None or getattr(cls.__init__, '_inline_mm_refused', False):
                continue
            cls.__init__ = _refusing_init(cls.__init__, functions, module_name)
            refused.append(cls)
    return refused


def unserved_refused() -> bool:
    """Whether every class of :data:`UNSERVED_MODULES` that mmcv has refuses to be built."""
    import sys
    classes = [getattr(sys.modules.get(m), c, None)
               for m, (names, _) in UNSERVED_MODULES.items() for c in names]
    classes = [c for c in classes if c is not None]
    return bool(classes) and all(getattr(c.__init__, '_inline_mm_refused', False)
                                 for c in classes)


def __getattr__(name: str):
    # mmcv's ext_loader asserts hasattr() for every op name of its 65 op modules when
    # `mmcv.ops` is imported; answer each lazily and fail only when it is called.
    if name.startswith('_'):
        raise AttributeError(name)
    return _missing_op(name)
