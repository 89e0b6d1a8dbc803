"""mmdet detectors as one graph each: preprocessing, backbone, neck, heads and mmdet's
test-time post-processing (box decoding, NMS, RoIAlign, each detection's mask).

Inputs: ``input`` ``(B, 3, H, W)`` float pixel values in the test pipeline's channel order
(what ``LoadImageFromFile`` + ``Resize`` give, before the data preprocessor), each image at
the top left; ``sizes`` ``(B, 2)`` int64, each image's ``(h, w)`` (its ``img_shape``).
Outputs, ``K = test_cfg.max_per_img`` rows per image, highest score first, the unused rows
last with score 0 and label -1:

* ``dets`` ``(B, K, 5)``: ``x1, y1, x2, y2, score`` in input pixels;
* ``labels`` ``(B, K)`` int64;
* ``masks`` ``(N, M, M)`` float32 (Mask R-CNN): the mask head's probabilities (sigmoid,
  ``M = 28``) of the ``N`` detections of the batch, one row per detection in the order of
  ``dets[labels >= 0]`` (image by image, highest score first; image ``b`` has
  ``(labels[b] >= 0).sum()`` rows). :func:`.runtime.paste_masks` pastes them into the image
  as mmdet's ``test_step`` does (at the original size, from the scale factor).

Only what is kept is computed: each RoI is aligned on its own FPN level (the RoIs of a level
gathered, aligned and scattered back, as torchvision's ``MultiScaleRoIAlign`` exports), the
box head runs on the real proposals and the mask head on the detections (their count
dynamic), never on empty rows.

Each image gets what mmdet's ``test_step`` gives it alone (with ``rescale`` and no resize:
boxes in input pixels; :mod:`.runtime` maps them to the original image), whatever the
batch: see :mod:`.common`; or, built with ``canvas='filled'``, what it gives a batch of
images that each fill the canvas, without the padding masks. Supported: two-stage detectors
with ``RPNHead`` / ``PadAwareRPNHead`` and ``StandardRoIHead`` (Faster / Mask R-CNN), and
``RetinaHead`` one-stage detectors, on an InLine backbone with mmdet's ``FPN``.
"""
from typing import List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .common import (NotExportable, Preprocess, RegionConvs, check_canvas, check_type,
                     region_of)
from .ops import cells_at, extend_edges, masked_max, nms_keep, roi_align

__all__ = ['DetectorGraph', 'TwoStageGraph', 'OneStageGraph', 'detector_graph']

_ADVICE = ('Export the backbone alone (tools/deployment/export_onnx.py without --whole) and '
           'run the rest in PyTorch, or use mmdeploy (docs/deploy.md).')


def _check_nms(nms_cfg, where: str) -> Tuple[float, bool]:
    nms_cfg = dict(nms_cfg or {})
    if nms_cfg.get('type', 'nms') != 'nms':
        raise NotExportable(f"{where}.nms is {nms_cfg.get('type')!r}: only type='nms' (greedy "
                            f'NMS) is exportable here. {_ADVICE}')
    return float(nms_cfg['iou_threshold']), bool(nms_cfg.get('class_agnostic', False))


def _check_coder(coder, where: str):
    from mmdet.models.task_modules.coders import DeltaXYWHBBoxCoder
    check_type(coder, [DeltaXYWHBBoxCoder], f'{where}.bbox_coder', _ADVICE)


def _decode(coder, priors: Tensor, deltas: Tensor, sizes: Tensor) -> Tensor:
    """``(B, N, 4)`` priors and ``(B, N, 4 * c)`` deltas -> ``(B, N, c, 4)`` boxes clipped to
    each image's ``(h, w)``: ``DeltaXYWHBBoxCoder.decode(..., max_shape=img_shape)``, by
    mmdet's own ``delta2bbox`` (the coder takes another path under ONNX export)."""
    from mmdet.models.task_modules.coders.delta_xywh_bbox_coder import delta2bbox
    b, n = deltas.shape[:2]
    boxes = delta2bbox(priors.reshape(-1, 4), deltas.reshape(b * n, -1), coder.means,
                       coder.stds, None, 16 / 1000, False, coder.add_ctr_clamp,
                       coder.ctr_clamp).view(b, n, -1, 4)
    if coder.clip_border:
        hi = sizes.flip(1).repeat(1, 2).to(boxes.dtype)[:, None, None, :]   # (w, h, w, h)
        boxes = torch.minimum(boxes.clamp_min(0), hi)
    return boxes


def _offset_nms(boxes: Tensor, scores: Tensor, valid: Tensor, idxs: Tensor, iou: float,
                agnostic: bool, max_out: int) -> Tensor:
    """mmcv's ``batched_nms`` per image: boxes of different ``idxs`` (labels, levels) moved
    apart by ``idxs * (max coordinate + 1)``; ``(B, N)`` keep mask."""
    if not agnostic:
        top = masked_max(boxes, valid)
        boxes = boxes + (idxs.to(boxes.dtype) * (top[:, None] + 1))[..., None]
    return nms_keep(boxes, torch.where(valid, scores, scores.new_full((), -1.)), iou, max_out,
                    -0.5)


def _top(keep: Tensor, scores: Tensor, k: int) -> Tuple[Tensor, Tensor, Tensor]:
    """The ``k`` highest kept scores per image: ``(scores, indices, valid)``."""
    kept = torch.where(keep, scores, scores.new_full((), -1.))
    top, index = kept.topk(min(k, kept.shape[1]), dim=1)
    return top, index, top > -0.5


def _take(x: Tensor, index: Tensor) -> Tensor:
    """``x[b, index[b]]`` for ``(B, N, ...)`` and ``(B, k)``."""
    shape = index.shape + x.shape[2:]
    return x.gather(1, index.reshape(index.shape + (1,) * (x.dim() - 2)).expand(shape))


class DetectorGraph(nn.Module):
    """The parts every exportable detector shares: preprocessing, the padding-aware
    backbone, the neck with convolutions limited to each image's region, anchors; with
    ``canvas='filled'`` (:data:`~.common.CANVASES`) the model's own, unmasked."""

    task = 'detection'

    def __init__(self, detector: nn.Module, hw: Tuple[int, int], canvas: str = 'padded'):
        super().__init__()
        self.canvas = check_canvas(canvas)
        from mmdet.models.necks import FPN

        from ..models import InLineBackbone
        self.detector = detector.eval()
        self.hw = (int(hw[0]), int(hw[1]))
        if not isinstance(detector.backbone, InLineBackbone):
            raise NotExportable(f'the backbone is {type(detector.backbone).__name__}: the '
                                'export computes each image of a padded batch as alone, which '
                                'needs a padding-aware InLine backbone')
        if getattr(detector, 'with_neck', False):
            check_type(detector.neck, [FPN], 'model.neck', _ADVICE)
        dp = detector.data_preprocessor
        self.preprocess = Preprocess(dp)
        self.divisor = int(getattr(dp, 'pad_size_divisor', 1) or 1)
        if self.hw[0] % self.divisor or self.hw[1] % self.divisor:
            raise NotExportable(
                f'the input size {self.hw[0]}x{self.hw[1]} is not a multiple of the data '
                f'preprocessor\'s pad_size_divisor ({self.divisor}), to which mmdet pads every '
                f'image: export at {-(-self.hw[0] // self.divisor) * self.divisor}x'
                f'{-(-self.hw[1] // self.divisor) * self.divisor}')

    def features(self, images: Tensor, sizes: Tensor, heads: List[nn.Module]):
        """Backbone and neck, then ``heads``' forwards on the neck's maps, every
        convolution limited to each image's region; returns (maps, sizes, region, head
        outputs). A ``'filled'`` graph masks nothing: its region is None (the canvas)."""
        sizes = torch.minimum(sizes.clamp_min(1), sizes.new_tensor(self.hw)[None])
        det = self.detector
        if self.canvas == 'filled':
            feats = det.backbone(self.preprocess(images, None))      # padding-unaware
            if getattr(det, 'with_neck', False):
                feats = det.neck(feats)
            return feats, sizes, None, [head(feats) for head in heads]
        x = self.preprocess(images, sizes)
        region = region_of(sizes, self.divisor, None, self.hw)
        with RegionConvs([det.neck] + heads, region, self.hw):
            feats = det.backbone(x, valid_sizes=sizes)
            if getattr(det, 'with_neck', False):
                feats = det.neck(feats)
            outs = [head(feats) for head in heads]
        return feats, sizes, region, outs

    def anchors(self, prior_generator, maps: List[Tensor], region: Optional[Tensor]):
        """Each level's anchors on the canvas (constants), and ``(B, N)`` whether each lies
        on a cell of each image's region (``PadAwareRPNHead``'s own cells; None for every
        level when ``region`` is None: all do)."""
        sizes = [tuple(m.shape[-2:]) for m in maps]
        anchors = prior_generator.grid_priors(sizes, dtype=maps[0].dtype, device=maps[0].device)
        if region is None:
            return anchors, [None] * len(maps)
        on = []
        for (h, w), n, (sw, sh) in zip(sizes, prior_generator.num_base_priors,
                                       prior_generator.strides):
            rows = torch.arange(h, device=region.device).repeat_interleave(w * n)
            cols = torch.arange(w, device=region.device).repeat_interleave(n).repeat(h)
            on.append((rows[None, :] < cells_at(region[:, :1], sh))
                      & (cols[None, :] < cells_at(region[:, 1:], sw)))
        return anchors, on

    @staticmethod
    def outputs(boxes: Tensor, scores: Tensor, labels: Tensor, valid: Tensor):
        """The ``dets`` and ``labels`` outputs, unused rows zero and -1."""
        dets = torch.cat([boxes, scores[..., None]], dim=-1)
        dets = torch.where(valid[..., None], dets, dets.new_zeros(()))
        return dets, torch.where(valid, labels, labels.new_full((), -1))


class TwoStageGraph(DetectorGraph):
    """Faster / Mask R-CNN: ``RPNHead`` (or ``PadAwareRPNHead``) proposals, ``StandardRoIHead``
    boxes and (with a mask head) each detection's mask probabilities."""

    def __init__(self, detector: nn.Module, hw: Tuple[int, int], canvas: str = 'padded'):
        super().__init__(detector, hw, canvas)
        from mmdet.models.dense_heads import RPNHead
        from mmdet.models.roi_heads import StandardRoIHead
        from mmdet.models.roi_heads.bbox_heads import (BBoxHead, ConvFCBBoxHead,
                                                       Shared2FCBBoxHead,
                                                       Shared4Conv1FCBBoxHead)
        from mmdet.models.roi_heads.mask_heads import FCNMaskHead
        from mmdet.models.roi_heads.roi_extractors import SingleRoIExtractor

        from ..models.detection.pad_aware_rpn import PadAwareRPNHead
        rpn, roi = detector.rpn_head, detector.roi_head
        check_type(rpn, [RPNHead, PadAwareRPNHead], 'model.rpn_head', _ADVICE)
        check_type(roi, [StandardRoIHead], 'model.roi_head', _ADVICE)
        check_type(roi.bbox_head, [BBoxHead, ConvFCBBoxHead, Shared2FCBBoxHead,
                                   Shared4Conv1FCBBoxHead], 'model.roi_head.bbox_head', _ADVICE)
        if not rpn.use_sigmoid_cls:
            raise NotExportable(f'model.rpn_head scores with softmax: not supported. {_ADVICE}')
        if roi.with_shared_head or roi.bbox_head.custom_cls_channels:
            raise NotExportable(f'model.roi_head has a shared head or custom class channels: '
                                f'not supported. {_ADVICE}')
        extractors = [roi.bbox_roi_extractor] + ([roi.mask_roi_extractor] if roi.with_mask
                                                 else [])
        for name, ext in zip(('bbox_roi_extractor', 'mask_roi_extractor'), extractors):
            check_type(ext, [SingleRoIExtractor], f'model.roi_head.{name}', _ADVICE)
            for layer in ext.roi_layers:
                if getattr(layer, 'pool_mode', 'avg') != 'avg' or not layer.aligned:
                    raise NotExportable(f'model.roi_head.{name}: RoIAlign with '
                                        f"pool_mode='avg', aligned=True only. {_ADVICE}")
        if roi.with_mask:
            check_type(roi.mask_head, [FCNMaskHead], 'model.roi_head.mask_head', _ADVICE)
            if roi.test_cfg.mask_thr_binary < 0:
                raise NotExportable('model.test_cfg.rcnn.mask_thr_binary < 0 (soft masks): '
                                    'binary masks only (a threshold >= 0)')
        _check_coder(rpn.bbox_coder, 'model.rpn_head')
        _check_coder(roi.bbox_head.bbox_coder, 'model.roi_head.bbox_head')
        self.rpn_iou, self.rpn_agnostic = _check_nms(rpn.test_cfg.nms, 'model.test_cfg.rpn')
        self.rcnn_iou, self.rcnn_agnostic = _check_nms(roi.test_cfg.nms, 'model.test_cfg.rcnn')
        self.with_mask = bool(roi.with_mask)

    def output_names(self) -> List[str]:
        return ['dets', 'labels'] + (['masks'] if self.with_mask else [])

    def metadata(self) -> dict:
        """What the runtime needs to paste the masks (``export_graph`` stores it)."""
        if not self.with_mask:
            return {}
        return dict(mask_thr_binary=float(self.detector.roi_head.test_cfg.mask_thr_binary))

    def forward(self, images: Tensor, sizes: Tensor):
        rpn, roi = self.detector.rpn_head, self.detector.roi_head
        feats, sizes, region, ((cls_scores, bbox_preds),) = self.features(images, sizes, [rpn])
        proposals, p_valid = self.proposals(cls_scores, bbox_preds, sizes, region)
        # RoIAlign of the image alone clamps at its map's border: the region's edge
        maps = feats if region is None else [
            extend_edges(f, cells_at(region, s))
            for f, s in zip(feats, roi.bbox_roi_extractor.featmap_strides)]
        boxes, scores, labels, valid = self.boxes(maps, proposals, p_valid, sizes)
        dets, labels_out = self.outputs(boxes, scores, labels, valid)
        if not self.with_mask:
            return dets, labels_out
        return dets, labels_out, self.masks(maps, boxes, labels, valid)

    # ------------------------------------------------------------------ RPN
    def proposals(self, cls_scores, bbox_preds, sizes, region):
        """``RPNHead.predict_by_feat`` on each image's own cells (``PadAwareRPNHead``):
        ``(B, P, 4)`` proposals, highest score first, and which are real."""
        rpn = self.detector.rpn_head
        cfg = rpn.test_cfg
        nms_pre = cfg.get('nms_pre', -1)
        b = cls_scores[0].shape[0]
        all_boxes, all_scores, all_valid, all_levels = [], [], [], []
        for level, (cls, reg, priors, on) in enumerate(zip(
                cls_scores, bbox_preds, *self.anchors(rpn.prior_generator, cls_scores, region))):
            scores = cls.permute(0, 2, 3, 1).reshape(b, -1).sigmoid()
            deltas = reg.permute(0, 2, 3, 1).reshape(b, -1, 4)
            if on is not None:
                scores = torch.where(on, scores, scores.new_full((), -1.))
            k = scores.shape[1] if nms_pre <= 0 else min(nms_pre, scores.shape[1])
            scores, index = scores.topk(k, dim=1)
            valid = scores > -0.5
            boxes = _decode(rpn.bbox_coder, priors[index], _take(deltas, index), sizes)[:, :, 0]
            if cfg.get('min_bbox_size', -1) >= 0:
                wh = boxes[..., 2:] - boxes[..., :2]
                valid = valid & (wh > cfg.min_bbox_size).all(dim=-1)
            all_boxes.append(boxes)
            all_scores.append(scores)
            all_valid.append(valid)
            all_levels.append(torch.full((k,), level, dtype=torch.long, device=boxes.device))
        boxes, scores = torch.cat(all_boxes, 1), torch.cat(all_scores, 1)
        valid, levels = torch.cat(all_valid, 1), torch.cat(all_levels)
        keep = _offset_nms(boxes, scores, valid, levels[None], self.rpn_iou, self.rpn_agnostic,
                           cfg.max_per_img)
        _, index, p_valid = _top(keep, scores, cfg.max_per_img)
        return _take(boxes, index), p_valid

    # ------------------------------------------------------------------ RoI heads
    @staticmethod
    def roi_features(extractor, maps: List[Tensor], rois: Tensor) -> Tensor:
        """``SingleRoIExtractor``: each RoI aligned on the level its scale maps to only (the
        RoIs of each level gathered, aligned, and scattered back to their rows)."""
        maps = maps[:extractor.num_inputs]
        rois = rois.type_as(maps[0])
        layers = extractor.roi_layers
        if len(maps) == 1:
            layer = layers[0]
            return roi_align(maps[0], rois, layer.output_size, layer.spatial_scale,
                             layer.sampling_ratio, True)
        levels = extractor.map_roi_levels(rois, len(maps))
        out = rois.new_zeros((rois.shape[0], maps[0].shape[1]) + tuple(layers[0].output_size))
        for i, (feat, layer) in enumerate(zip(maps, layers)):
            index = torch.nonzero(levels == i)[:, 0]
            r = roi_align(feat, rois[index], layer.output_size, layer.spatial_scale,
                          layer.sampling_ratio, True)
            out = out.index_put((index,), r)
        return out

    @staticmethod
    def rois(boxes: Tensor, valid: Tensor) -> Tuple[Tensor, Tensor]:
        """``(B, N, 4)`` boxes and ``(B, N)`` which are real -> the real ones' rows in the
        flattened ``(B * N)`` and their ``(R, 5)`` RoIs, the image index first
        (``bbox2roi``)."""
        b, n = boxes.shape[:2]
        index = torch.nonzero(valid.reshape(-1))[:, 0]
        image = torch.div(index, n, rounding_mode='floor').to(boxes.dtype)
        return index, torch.cat([image[:, None], boxes.reshape(-1, 4)[index]], dim=1)

    def boxes(self, maps, proposals, p_valid, sizes):
        """``StandardRoIHead.predict_bbox`` + ``multiclass_nms``: ``(B, K, 4)`` boxes,
        scores, labels and which rows are detections."""
        roi = self.detector.roi_head
        head, cfg = roi.bbox_head, roi.test_cfg
        b, p = proposals.shape[:2]
        index, rois = self.rois(proposals, p_valid)
        cls_score, bbox_pred = head(self.roi_features(roi.bbox_roi_extractor, maps, rois))
        # back to every proposal's row (those of no proposal stay 0, and are not valid)
        cls_score = cls_score.new_zeros((b * p, cls_score.shape[1])).index_put((index,),
                                                                                cls_score)
        bbox_pred = bbox_pred.new_zeros((b * p, bbox_pred.shape[1])).index_put((index,),
                                                                                bbox_pred)
        scores = F.softmax(cls_score, dim=-1)[:, :-1].reshape(b, p, -1)
        c = scores.shape[-1]
        boxes = _decode(head.bbox_coder, proposals, bbox_pred.reshape(b, p, -1), sizes)
        boxes = boxes.expand(b, p, c, 4).reshape(b, p * c, 4)
        scores = scores.reshape(b, p * c)
        labels = torch.arange(c, device=scores.device).repeat(p)[None]
        valid = p_valid.repeat_interleave(c, dim=1) & (scores > cfg.score_thr)
        keep = _offset_nms(boxes, scores, valid, labels, self.rcnn_iou, self.rcnn_agnostic,
                           cfg.max_per_img)
        top, index, d_valid = _top(keep, scores, cfg.max_per_img)
        return _take(boxes, index), top, _take(labels.expand(b, -1), index), d_valid

    def masks(self, maps, boxes, labels, valid):
        """``StandardRoIHead.predict_mask`` up to the paste: ``(N, M, M)`` probabilities of
        the ``N`` detections (``valid`` rows, in order), their class's channel."""
        roi = self.detector.roi_head
        index, rois = self.rois(boxes, valid)
        preds = roi.mask_head(self.roi_features(roi.mask_roi_extractor, maps, rois))
        if roi.mask_head.class_agnostic:
            preds = preds[:, 0]
        else:
            label = labels.reshape(-1)[index][:, None, None, None]
            preds = preds.gather(1, label.expand(-1, 1, *preds.shape[-2:]))[:, 0]
        return preds.sigmoid()


class OneStageGraph(DetectorGraph):
    """RetinaNet: ``RetinaHead`` scores and boxes, per level ``nms_pre`` candidates over
    ``score_thr``, then ``batched_nms``."""

    def __init__(self, detector: nn.Module, hw: Tuple[int, int], canvas: str = 'padded'):
        super().__init__(detector, hw, canvas)
        from mmdet.models.dense_heads import AnchorHead, RetinaHead
        head = detector.bbox_head
        check_type(head, [RetinaHead, AnchorHead], 'model.bbox_head', _ADVICE)
        _check_coder(head.bbox_coder, 'model.bbox_head')
        self.iou, self.agnostic = _check_nms(head.test_cfg.nms, 'model.test_cfg')

    def output_names(self) -> List[str]:
        return ['dets', 'labels']

    def forward(self, images: Tensor, sizes: Tensor):
        head = self.detector.bbox_head
        cfg = head.test_cfg
        _, sizes, region, ((cls_scores, bbox_preds),) = self.features(images, sizes, [head])
        b = cls_scores[0].shape[0]
        c = head.cls_out_channels
        nms_pre = cfg.get('nms_pre', -1)
        all_boxes, all_scores, all_labels, all_valid = [], [], [], []
        for cls, reg, priors, on_cells in zip(
                cls_scores, bbox_preds, *self.anchors(head.prior_generator, cls_scores, region)):
            logits = cls.permute(0, 2, 3, 1).reshape(b, -1, c)
            scores = logits.sigmoid() if head.use_sigmoid_cls else logits.softmax(-1)[..., :-1]
            n_cls = scores.shape[-1]
            deltas = reg.permute(0, 2, 3, 1).reshape(b, -1, 4)
            on = scores > cfg.score_thr
            if on_cells is not None:
                on = on_cells[..., None] & on
            scores = torch.where(on, scores, scores.new_full((), -1.)).reshape(b, -1)
            k = scores.shape[1] if nms_pre <= 0 else min(nms_pre, scores.shape[1])
            scores, index = scores.topk(k, dim=1)
            anchor = torch.div(index, n_cls, rounding_mode='floor')
            boxes = _decode(head.bbox_coder, priors[anchor], _take(deltas, anchor), sizes)
            all_boxes.append(boxes[:, :, 0])
            all_scores.append(scores)
            all_labels.append(index - anchor * n_cls)
            all_valid.append(scores > -0.5)
        boxes, scores = torch.cat(all_boxes, 1), torch.cat(all_scores, 1)
        labels, valid = torch.cat(all_labels, 1), torch.cat(all_valid, 1)
        if cfg.get('min_bbox_size', -1) >= 0:
            wh = boxes[..., 2:] - boxes[..., :2]
            valid = valid & (wh > cfg.min_bbox_size).all(dim=-1)
        keep = _offset_nms(boxes, scores, valid, labels, self.iou, self.agnostic,
                           cfg.max_per_img)
        top, index, d_valid = _top(keep, scores, cfg.max_per_img)
        return self.outputs(_take(boxes, index), top, _take(labels, index), d_valid)


def detector_graph(detector: nn.Module, hw: Tuple[int, int],
                   canvas: str = 'padded') -> DetectorGraph:
    """The graph module of an mmdet detector: :class:`TwoStageGraph` or
    :class:`OneStageGraph`; a clear :class:`~.common.NotExportable` for other models."""
    from mmdet.models.detectors import SingleStageDetector, TwoStageDetector
    if isinstance(detector, TwoStageDetector):
        return TwoStageGraph(detector, hw, canvas)
    if isinstance(detector, SingleStageDetector):
        return OneStageGraph(detector, hw, canvas)
    raise NotExportable(f'the model is {type(detector).__name__}: the export supports '
                        f'two-stage (Faster / Mask R-CNN) and RetinaNet detectors. {_ADVICE}')
