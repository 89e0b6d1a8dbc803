"""mmdet's RPN head, proposing for each image only from the anchors on its own cells.

mmdet batches images of different sizes by zero-padding them to one canvas. In
training, an RPN learns only on anchors inside each image's own ``pad_shape`` (the
image padded to the preprocessor's divisor, as it is alone): the anchor heads'
``valid_flags`` drop the rest of the canvas. Yet the stock ``RPNHead`` proposes from
every anchor of the canvas, at test time and for the proposals it hands the RoI head
in training, so the untrained area next to a small image competes for the
``nms_pre`` slots and the NMS with the image's own anchors. With a padding-aware
backbone the padded area is all zeros and the FPN puts only its biases there, which
an RPN can score highly: on the demo model such anchors took 71% of the pre-NMS slots
of a 256x160 image next to a 256x256 one, and pushed out its own proposals
(``tools/analysis_tools/padding_consistency.py``).

:class:`PadAwareRPNHead` proposes for each image from the cells its ``pad_shape``
covers at each level (the cells the training targets use), so an image gets the
proposals it gets alone. A batch in which every image fills the canvas runs the
stock code unchanged.

Under autocast (AMP training, ``test_cfg.fp16=True``) its two 1x1 output convolutions, the
objectness and the box deltas, run in fp32 on the (low-precision) features of its 3x3 conv:
bf16 keeps 8 bits of mantissa, so bf16 scores tie by the hundred in the ``nms_pre`` top-k and
bf16 anchors and deltas move proposal corners by pixels, which cost the demo's detector up to
0.014 box AP against fp32 (docs/dev/training_at_scale.md); in fp32 the gap stays within 0.01
for a few hundred MACs per cell. Without autocast nothing changes. Registered in mmdet's ``MODELS`` by ``import inline_mm`` (this
module, which imports mmdet's model zoo, only when a config builds the head).
"""
import math
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from mmdet.models.dense_heads import RPNHead
from torch import Tensor

__all__ = ['PadAwareRPNHead', 'outputs_in_fp32']


def outputs_in_fp32(head: RPNHead, hidden: Tensor) -> Tuple[Tensor, Tensor]:
    """``head``'s objectness and box deltas from its 3x3 conv's output ``hidden``: in fp32 under
    autocast (the module's docstring says why), else as the stock head computes them."""
    if not torch.is_autocast_enabled(hidden.device.type):
        return head.rpn_cls(hidden), head.rpn_reg(hidden)
    with torch.autocast(hidden.device.type, enabled=False):
        hidden = hidden.float()
        return head.rpn_cls(hidden), head.rpn_reg(hidden)


class PadAwareRPNHead(RPNHead):
    """``RPNHead`` whose proposals for an image come only from anchors on the cells of
    its own ``pad_shape`` (``img_shape`` when the metadata has none). Same arguments,
    parameters and losses as ``RPNHead``; under autocast its scores and deltas are computed in
    fp32 (the module's docstring says why)."""

    def forward_single(self, x: Tensor) -> Tuple[Tensor, Tensor]:
        return outputs_in_fp32(self, F.relu(self.rpn_conv(x)))

    def own_cells(self, meta: dict, maps: Sequence[Tensor]) -> List[Tuple[int, int]]:
        """``(rows, cols)`` of each level that one image covers alone (as mmdet's
        anchor ``valid_flags``: ``ceil(side / stride)``, at most the map)."""
        h, w = (meta.get('pad_shape') or meta['img_shape'])[:2]
        cells = []
        for (stride_w, stride_h), m in zip(self.prior_generator.strides, maps):
            rows, cols = m.shape[-2:]
            cells.append((min(math.ceil(h / stride_h), rows), min(math.ceil(w / stride_w), cols)))
        return cells

    def predict_by_feat(self, cls_scores: List[Tensor], bbox_preds: List[Tensor],
                        score_factors: Optional[List[Tensor]] = None,
                        batch_img_metas: Optional[List[dict]] = None, cfg=None,
                        rescale: bool = False, with_nms: bool = True):
        full = [tuple(m.shape[-2:]) for m in cls_scores]
        cells = [self.own_cells(meta, cls_scores) for meta in batch_img_metas]
        if all(c == full for c in cells):
            return super().predict_by_feat(cls_scores, bbox_preds, score_factors,
                                           batch_img_metas, cfg, rescale, with_nms)
        results = []
        for i, (meta, own) in enumerate(zip(batch_img_metas, cells)):
            def crop(maps):
                return None if maps is None else [
                    m[i:i + 1, :, :rows, :cols] for m, (rows, cols) in zip(maps, own)]
            results += super().predict_by_feat(crop(cls_scores), crop(bbox_preds),
                                               crop(score_factors), [meta], cfg, rescale,
                                               with_nms)
        return results
