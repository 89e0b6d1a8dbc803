"""mmcv's ``nms`` hands back its kept scores in the scores' own dtype.

mmcv's Python ``nms`` returns ``dets = cat(boxes[keep], scores[keep])``, in the wider of the
two dtypes. ``batched_nms`` past its ``split_thr`` (10,000 boxes) writes ``dets[:, -1]`` into
a tensor made with ``scores.new_zeros``, which needs the two dtypes equal. Under CPU autocast
mmdet's RoI head scores in bf16 (softmax is not on CPU autocast's fp32 list, as it is on
CUDA's) while its boxes, decoded from the fp32 proposals of ``PadAwareRPNHead``, are fp32: a
model with many candidate boxes (early in training, random weights) then stops in the NMS
with "Index put requires the source and destination dtypes match". The row
``nms_scores_dtype`` makes ``mmcv.ops.nms.nms`` return ``dets`` in the scores' dtype where the
two differ (``batched_nms`` looks ``nms`` up in its module at each call); the boxes it returns
are its own input's, unchanged. Equal dtypes, the usual case, see no change.
"""
import importlib

import torch

from .patch import BY_ENGINE, Patch, always, wrap_once, wrapped

__all__ = ['PATCHES', 'install', 'installed']

_MARK = '_inline_mm_nms_scores_dtype'


def _module():
    return importlib.import_module('mmcv.ops.nms')   # the module, not mmcv.ops' function


def _dets_in_scores_dtype(nms):
    def call(boxes, scores, *args, **kwargs):
        dets, inds = nms(boxes, scores, *args, **kwargs)
        if (isinstance(dets, torch.Tensor) and isinstance(scores, torch.Tensor)
                and scores.is_floating_point() and dets.dtype != scores.dtype):
            dets = dets.to(scores.dtype)
        return dets, inds
    return call


def install():
    """Wrap ``mmcv.ops.nms.nms`` (idempotent)."""
    wrap_once(_module(), 'nms', _MARK, _dets_in_scores_dtype)


def installed() -> bool:
    try:
        return wrapped(_module(), 'nms', _MARK)
    except ImportError:
        return False


#: the row of the patch table this module switches on (python -m inline_mm.env)
PATCHES = (
    Patch('nms_scores_dtype', "mmcv.ops.nms.nms: its kept scores (dets) in the scores' dtype",
          "batched_nms past split_thr stops when boxes and scores differ in dtype (CPU "
          "autocast: bf16 RoI scores, fp32 boxes): 'Index put requires the source and "
          "destination dtypes match'", 'mmcv 2.x', BY_ENGINE,
          always("mmcv's nms returns dets in the wider of the boxes' and scores' dtypes"),
          installed, install),
)
