"""mmseg UperNet as one graph: preprocessing, backbone, ``UPerHead`` and the class map.

Inputs as for the detectors (:mod:`.detection`): ``input`` ``(B, 3, H, W)`` float pixel
values, ``sizes`` ``(B, 2)`` int64 each image's ``(h, w)``. Output ``seg`` ``(B, H, W)``
int64: each pixel's class (the argmax of the logits resized to the image, as
``EncoderDecoder.predict`` with ``mode='whole'``), -1 outside the image.

Each image gets what mmseg computes for it alone at its own size: the pyramid pooling
averages over the image's own cells (``nn.AdaptiveAvgPool2d`` of its map), and every
bilinear resize maps the image's own cells to its own cells at the other level, with the
scale ``F.interpolate`` takes for those sizes (:func:`.ops.resize_bilinear`), so an image
of any size in a padded batch gets its own class map; convolutions see zeros beyond it. A
graph built with ``canvas='filled'`` (every image of the canvas's size) computes the same with
the canvas as every image's region and no padding masks (the backbone padding-unaware, the
convolutions unmasked).
"""
from typing import List, Tuple

import torch
import torch.nn as nn
from torch import Tensor

from .common import (NotExportable, Preprocess, RegionConvs, check_canvas, check_type,
                     region_of, stride_of)
from .ops import cells_at, region_adaptive_avg_pool, resize_bilinear

__all__ = ['SegmentorGraph', 'segmentor_graph']

_ADVICE = ('Export the backbone alone (tools/deployment/export_onnx.py without --whole) and '
           'run the rest in PyTorch, or use mmdeploy (docs/deploy.md).')


class SegmentorGraph(nn.Module):
    """``EncoderDecoder`` with an InLine backbone, no neck and a ``UPerHead``, whole-image
    inference."""

    task = 'segmentation'

    def __init__(self, segmentor: nn.Module, hw: Tuple[int, int], canvas: str = 'padded'):
        super().__init__()
        self.canvas = check_canvas(canvas)
        from mmseg.models.decode_heads import UPerHead
        from mmseg.models.segmentors import EncoderDecoder

        from ..models import InLineBackbone
        check_type(segmentor, [EncoderDecoder], 'the model', _ADVICE)
        check_type(segmentor.decode_head, [UPerHead], 'model.decode_head', _ADVICE)
        if not isinstance(segmentor.backbone, InLineBackbone):
            raise NotExportable(f'the backbone is {type(segmentor.backbone).__name__}: the '
                                'export computes each image of a padded batch as alone, which '
                                'needs a padding-aware InLine backbone')
        if segmentor.with_neck:
            raise NotExportable(f'model.neck is {type(segmentor.neck).__name__}: the UperNet '
                                f'export takes the backbone maps directly (no neck). {_ADVICE}')
        mode = (segmentor.test_cfg or {}).get('mode', 'whole')
        if mode != 'whole':
            raise NotExportable(f"model.test_cfg.mode is {mode!r}: the export runs whole images "
                                "(mode='whole'); export a config that tests whole images")
        if segmentor.decode_head.out_channels < 2:
            raise NotExportable('model.decode_head has one output channel (binary, thresholded):'
                                ' the export takes the argmax of two or more classes')
        self.segmentor = segmentor.eval()
        self.hw = (int(hw[0]), int(hw[1]))
        dp = segmentor.data_preprocessor
        self.preprocess = Preprocess(dp)
        test_cfg = getattr(dp, 'test_cfg', None) or {}
        self.divisor = int(test_cfg.get('size_divisor') or 1)
        fixed = test_cfg.get('size')
        self.fixed = None if fixed is None else (int(fixed[0]), int(fixed[1]))

    def output_names(self) -> List[str]:
        return ['seg']

    def forward(self, images: Tensor, sizes: Tensor):
        sizes = torch.minimum(sizes.clamp_min(1), sizes.new_tensor(self.hw)[None])
        head = self.segmentor.decode_head
        if self.canvas == 'filled':          # every image's region is the canvas: no masks
            region = sizes.new_tensor(self.hw)[None].expand_as(sizes)
            feats = self.segmentor.backbone(self.preprocess(images, None))
            logits = self.uper(head, feats, region)
        else:
            x = self.preprocess(images, sizes)
            region = region_of(sizes, self.divisor, self.fixed, self.hw)
            with RegionConvs([head], region, self.hw):
                feats = self.segmentor.backbone(x, valid_sizes=sizes)
                logits = self.uper(head, feats, region)
        level0 = cells_at(region, stride_of(tuple(logits.shape[-2:]), self.hw))
        logits = resize_bilinear(logits, level0, region, self.hw, head.align_corners)
        seg = logits.argmax(dim=1)
        rows = torch.arange(self.hw[0], device=seg.device)[None, :] < sizes[:, :1]
        cols = torch.arange(self.hw[1], device=seg.device)[None, :] < sizes[:, 1:]
        return torch.where(rows[:, :, None] & cols[:, None, :], seg, seg.new_full((), -1))

    def uper(self, head, feats, region: Tensor) -> Tensor:
        """``UPerHead.forward`` on each image's own cells."""
        inputs = head._transform_inputs(feats)
        cells = [cells_at(region, stride_of(tuple(f.shape[-2:]), self.hw)) for f in inputs]
        align = head.align_corners

        def resize(t, i, j):           # level i's cells -> level j's, on level j's map
            return resize_bilinear(t, cells[i], cells[j], tuple(inputs[j].shape[-2:]), align)

        laterals = [conv(inputs[i]) for i, conv in enumerate(head.lateral_convs)]
        x = inputs[-1]
        psp = [x]
        for ppm in head.psp_modules:
            pool, conv = ppm[0], ppm[1:]
            out = pool.output_size if isinstance(pool.output_size, int) else pool.output_size[0]
            pooled = conv(region_adaptive_avg_pool(x, cells[-1], out))
            grid = torch.full_like(cells[-1], out)
            psp.append(resize_bilinear(pooled, grid, cells[-1], tuple(x.shape[-2:]), align))
        laterals.append(head.bottleneck(torch.cat(psp, dim=1)))
        n = len(laterals)
        for i in range(n - 1, 0, -1):
            laterals[i - 1] = laterals[i - 1] + resize(laterals[i], i, i - 1)
        outs = [head.fpn_convs[i](laterals[i]) for i in range(n - 1)] + [laterals[-1]]
        for i in range(n - 1, 0, -1):
            outs[i] = resize(outs[i], i, 0)
        return head.cls_seg(head.fpn_bottleneck(torch.cat(outs, dim=1)))


def segmentor_graph(segmentor: nn.Module, hw: Tuple[int, int],
                    canvas: str = 'padded') -> SegmentorGraph:
    """The graph module of an mmseg segmentor (UperNet), or a clear
    :class:`~.common.NotExportable`."""
    return SegmentorGraph(segmentor, hw, canvas)
