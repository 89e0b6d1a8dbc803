"""Tensor operations of the deployable models that ONNX expresses in standard ops.

Each runs in PyTorch as written (the reference the exported graph is checked against)
and traces, under ``torch.onnx.export(..., dynamo=False)``, into standard ONNX ops at
opset 17: no custom-op library is needed to run the file.

* :func:`nms_keep`: per-image greedy NMS as ``NonMaxSuppression`` (one class; the
  callers separate classes or levels by coordinate offsets, as mmcv's ``batched_nms``
  does), returned as a keep mask;
* :func:`roi_align`: torchvision's, which torchvision exports as ``RoiAlign`` (opset 16
  ``half_pixel`` for ``aligned=True``);
* :func:`resize_bilinear`: ``F.interpolate(mode='bilinear')`` of each image's own region
  to a region of another size per image (the sizes are tensors), by row and column
  gathers: what the image alone gets from ``F.interpolate`` at its own sizes;
* :func:`region_adaptive_avg_pool`: ``nn.AdaptiveAvgPool2d`` over each image's own region;
* :func:`zero_outside` / :func:`extend_edges`: what lies outside each image's region set
  to zero (a convolution's zero padding) or to the region's edge (RoIAlign's border clamp).

Sizes are ``(B, 2)`` int64 tensors ``(h, w)`` of each image's region at the top left of
its map (``cells`` at a feature level).
"""
from typing import Tuple

import torch
from torch import Tensor

__all__ = ['nms_keep', 'roi_align', 'cells_at', 'zero_outside', 'extend_edges',
           'resize_bilinear', 'region_adaptive_avg_pool', 'masked_max']


# ------------------------------------------------------------------------ NMS
class _NMSKeep(torch.autograd.Function):
    """``(B, N, 4)`` boxes, ``(B, N)`` scores -> ``(B, N)`` bool: the boxes greedy NMS
    keeps in each image (at most ``max_out``, only scores above ``score_threshold``)."""

    @staticmethod
    def forward(ctx, boxes: Tensor, scores: Tensor, max_out: int, iou_threshold: float,
                score_threshold: float) -> Tensor:
        from mmcv.ops import nms
        keep = torch.zeros(scores.shape, dtype=torch.bool, device=scores.device)
        for b in range(boxes.shape[0]):
            candidates = (scores[b] > score_threshold).nonzero()[:, 0]
            if candidates.numel():
                # mmcv's nms, as mmdet's batched_nms calls it (its greedy order, ties
                # included); highest score first
                kept = nms(boxes[b, candidates], scores[b, candidates], iou_threshold)[1]
                keep[b, candidates[kept[:max_out]]] = True
        return keep

    @staticmethod
    def symbolic(g, boxes, scores, max_out, iou_threshold, score_threshold):
        def const(value, dtype):
            return g.op('Constant', value_t=torch.tensor(value, dtype=dtype))
        selected = g.op('NonMaxSuppression', boxes,
                        g.op('Unsqueeze', scores, const([1], torch.long)),
                        const([max_out], torch.long), const([iou_threshold], torch.float),
                        const([score_threshold], torch.float))       # (S, 3): batch, class, box
        where = g.op('Gather', selected, const([0, 2], torch.long), axis_i=1)
        count = g.op('Slice', g.op('Shape', where), const([0], torch.long),
                     const([1], torch.long))
        ones = g.op('ConstantOfShape', count, value_t=torch.tensor([True]))
        zeros = g.op('ConstantOfShape', g.op('Shape', scores), value_t=torch.tensor([False]))
        keep = g.op('ScatterND', zeros, where, ones)
        keep.setType(scores.type().with_dtype(torch.bool))
        return keep


def nms_keep(boxes: Tensor, scores: Tensor, iou_threshold: float, max_out: int,
             score_threshold: float = -1.) -> Tensor:
    """Which of each image's ``(B, N, 4)`` boxes greedy NMS keeps: a ``(B, N)`` bool mask.

    Only boxes scoring above ``score_threshold`` take part (give the others a lower
    score), at most ``max_out`` per image, the highest scores first (ONNX
    ``NonMaxSuppression``, one class; its IoU test, strict ``>``, is mmcv's)."""
    return _NMSKeep.apply(boxes, scores, int(max_out), float(iou_threshold),
                          float(score_threshold))


def masked_max(x: Tensor, valid: Tensor) -> Tensor:
    """``(B, N, 4)``, ``(B, N)`` -> ``(B,)``: the largest coordinate of each image's valid
    boxes (0 when it has none): ``boxes.max()`` of mmcv's ``batched_nms`` offsets."""
    low = torch.finfo(x.dtype).min
    top = torch.where(valid[..., None], x, x.new_full((), low)).flatten(1).max(dim=1)[0]
    return torch.where(valid.any(dim=1), top, top.new_zeros(()))


# ------------------------------------------------------------------------ RoIAlign
def roi_align(feature: Tensor, rois: Tensor, output_size: Tuple[int, int], spatial_scale: float,
              sampling_ratio: int, aligned: bool) -> Tensor:
    """torchvision's ``roi_align`` (average), exported as ONNX ``RoiAlign``; ``rois``
    ``(R, 5)`` with the image index first (mmdet's ``bbox2roi`` layout)."""
    from torchvision.ops import roi_align as tv_roi_align
    return tv_roi_align(feature, rois, output_size, spatial_scale, sampling_ratio, aligned)


# ------------------------------------------------------------------------ regions
def cells_at(region: Tensor, stride: int) -> Tensor:
    """The cells of a stride-``stride`` map an image's ``(B, 2)`` pixel region covers:
    ``ceil(region / stride)`` (the map of the image alone)."""
    return torch.div(region + (stride - 1), stride, rounding_mode='floor')


def _inside(cells: Tensor, hw: Tuple[int, int]) -> Tensor:
    """``(B, 1, H, W)`` bool: True inside each image's ``cells``."""
    rows = torch.arange(hw[0], device=cells.device)[None, :] < cells[:, :1]
    cols = torch.arange(hw[1], device=cells.device)[None, :] < cells[:, 1:]
    return (rows[:, :, None] & cols[:, None, :])[:, None]


def zero_outside(x: Tensor, cells: Tensor) -> Tensor:
    """``(B, C, H, W)`` with everything outside each image's ``cells`` set to 0 (what a
    convolution of the image alone sees there: its zero padding)."""
    return torch.where(_inside(cells, x.shape[-2:]), x, x.new_zeros(()))


def extend_edges(x: Tensor, cells: Tensor) -> Tensor:
    """``(B, C, H, W)`` with each image's last row and column of ``cells`` repeated over
    the rest of the map: a bilinear sample between the region's edge and the next cell
    gets the edge, as RoIAlign clamps at the border of the image's own map."""
    b, c, h, w = x.shape
    rows = torch.minimum(torch.arange(h, device=x.device)[None, :], cells[:, :1] - 1)
    x = x.gather(2, rows[:, None, :, None].expand(b, c, h, w))
    cols = torch.minimum(torch.arange(w, device=x.device)[None, :], cells[:, 1:] - 1)
    return x.gather(3, cols[:, None, None, :].expand(b, c, h, w))


def _lerp_indices(size_in: Tensor, size_out: Tensor, n_out: int, align_corners: bool):
    """Per image ``(B,)`` sizes -> ``(B, n_out)`` source indices ``i0, i1`` and weights
    ``l0, l1`` of ``F.interpolate``'s linear mode from ``size_in`` to ``size_out`` cells
    (PyTorch's CPU kernel: source index clamped at 0, the index at ``size_in - 1``)."""
    dst = torch.arange(n_out, device=size_in.device, dtype=torch.float32)[None, :]
    n_in, n_o = size_in.float()[:, None], size_out.float()[:, None]
    if align_corners:
        scale = torch.where(n_o > 1, (n_in - 1) / (n_o - 1).clamp_min(1), torch.zeros_like(n_o))
        src = scale * dst
    else:
        src = (n_in / n_o * (dst + 0.5) - 0.5).clamp_min(0)
    last = size_in[:, None] - 1
    i0 = torch.minimum(src.floor().long(), last)
    l1 = (src - i0.float()).clamp(0, 1)
    i1 = torch.minimum(i0 + 1, last)
    return i0, i1, 1 - l1, l1


def _gather_rows(x: Tensor, index: Tensor) -> Tensor:
    """``(B, C, H, W)``, ``(B, n)`` -> ``(B, C, n, W)``: rows of each image by its own
    indices, as one ``Gather`` on the flattened batch and rows (a small index)."""
    b, c, h, w = x.shape
    flat = x.transpose(1, 2).reshape(-1, c, w)                       # (B*H, C, W)
    batch = torch.arange(b, device=x.device)[:, None] * h
    return flat[(index + batch).reshape(-1)].reshape(b, -1, c, w).transpose(1, 2)


def resize_bilinear(x: Tensor, cells_in: Tensor, cells_out: Tensor, hw_out: Tuple[int, int],
                    align_corners: bool = False) -> Tensor:
    """``(B, C, H, W)`` -> ``(B, C, *hw_out)``: each image's ``cells_in`` region resized
    bilinearly to its ``cells_out`` region (top left of the output; what lies beyond it
    repeats the region's edge), as ``F.interpolate(region, size=cells_out,
    mode='bilinear', align_corners=...)`` does for the image alone, rows then columns
    with the weights of PyTorch's kernel."""
    r0, r1, rl0, rl1 = _lerp_indices(cells_in[:, 0], cells_out[:, 0], hw_out[0], align_corners)
    c0, c1, cl0, cl1 = _lerp_indices(cells_in[:, 1], cells_out[:, 1], hw_out[1], align_corners)
    dt = x.dtype
    # columns first (the smaller map at that point for an upsampling)
    xt = x.transpose(2, 3)
    cols = (_gather_rows(xt, c0) * cl0[:, None, :, None].to(dt)
            + _gather_rows(xt, c1) * cl1[:, None, :, None].to(dt)).transpose(2, 3)
    return (_gather_rows(cols, r0) * rl0[:, None, :, None].to(dt)
            + _gather_rows(cols, r1) * rl1[:, None, :, None].to(dt))


def _pool_matrix(size: Tensor, n: int, out: int) -> Tensor:
    """``(B, out, n)``: row ``i`` averages the cells ``[floor(i*s/out), ceil((i+1)*s/out))``
    of each image's ``s = size`` cells (``nn.AdaptiveAvgPool2d``'s bins)."""
    i = torch.arange(out, device=size.device)[None, :, None]
    s = size[:, None, None]
    start = torch.div(i * s, out, rounding_mode='floor')
    end = torch.div((i + 1) * s + out - 1, out, rounding_mode='floor')
    j = torch.arange(n, device=size.device)[None, None, :]
    inside = (j >= start) & (j < end)
    return inside.float() / (end - start).clamp_min(1).float()


def region_adaptive_avg_pool(x: Tensor, cells: Tensor, out: int) -> Tensor:
    """``(B, C, H, W)`` -> ``(B, C, out, out)``: ``nn.AdaptiveAvgPool2d(out)`` of each
    image's ``cells`` region, as two matrix products with per-image bin matrices."""
    rows = _pool_matrix(cells[:, 0], x.shape[2], out).to(x.dtype)          # (B, out, H)
    cols = _pool_matrix(cells[:, 1], x.shape[3], out).to(x.dtype)          # (B, out, W)
    return rows[:, None] @ x @ cols[:, None].transpose(-1, -2)
