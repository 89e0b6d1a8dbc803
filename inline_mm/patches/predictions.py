"""Predictions made in low precision reach the metrics, hooks and inferencers in fp32.

``test_cfg = dict(fp16=True)`` (or ``val_cfg``, or ``--cfg-options test_cfg.fp16=True``)
makes mmengine's ``TestLoop`` / ``ValLoop`` run ``model.test_step`` under autocast: bf16 on a
CPU, fp16 on CUDA. The predictions come back in that dtype (boxes, scores, logits, masks'
probabilities), and the loops hand them to the metrics and hooks as they are: mmdet's
``CocoMetric.process`` stops at ``pred['bboxes'].cpu().numpy()`` with ``TypeError: Got
unsupported ScalarType BFloat16``, mmseg's and the visualisers' numpy conversions alike, and
the stock inferencers (``DetInferencer``, ``MMSegInferencer``) called under ``torch.autocast``
do the same. The row ``fp32_predictions`` of :data:`PATCHES` below converts them in the one
place they all come from, mmengine's ``BaseModel.val_step`` and ``test_step`` (the model
wrappers, DDP, FSDP and test-time augmentation, call these): every fp16 or bf16 tensor of the
predictions, at any depth of their data elements, lists and dicts, becomes fp32. Integer and
boolean fields, fp32 and fp64 tensors are left as they are, so fp32 runs see no change.
"""
import torch

from .patch import BY_ENGINE, Patch, always, wrap_once, wrapped

__all__ = ['PATCHES', 'LOW_PRECISION', 'to_fp32', 'install', 'installed']

#: the dtypes autocast computes in, converted to fp32 in the predictions
LOW_PRECISION = (torch.float16, torch.bfloat16)


def to_fp32(results):
    """``results`` with every fp16 / bf16 tensor made fp32: lists, tuples and dicts rebuilt,
    other mappings and mmengine data elements (``DetDataSample``, ``InstanceData``,
    ``PixelData`` ...) updated in place; anything else returned as it is."""
    from mmengine.structures import BaseDataElement
    if isinstance(results, torch.Tensor):
        return results.float() if results.dtype in LOW_PRECISION else results
    if isinstance(results, BaseDataElement):
        for key, value in list(results.items()):
            converted = to_fp32(value)
            if converted is not value:
                setattr(results, key, converted)
        return results
    if type(results) in (list, tuple):
        return type(results)(to_fp32(r) for r in results)
    if type(results) is dict:
        return {k: to_fp32(v) for k, v in results.items()}
    if isinstance(results, dict):           # OrderedDict, defaultdict ...: in place
        results.update((k, to_fp32(v)) for k, v in list(results.items()))
    return results


def _fp32_results(step):
    def predict_step(self, data):
        return to_fp32(step(self, data))
    return predict_step


def install():
    """Wrap ``BaseModel.val_step`` and ``BaseModel.test_step`` (idempotent)."""
    from mmengine.model import BaseModel
    for name in ('val_step', 'test_step'):
        wrap_once(BaseModel, name, '_inline_mm_fp32_predictions', _fp32_results)


def installed() -> bool:
    from mmengine.model import BaseModel
    return all(wrapped(BaseModel, name, '_inline_mm_fp32_predictions')
               for name in ('val_step', 'test_step'))


#: the row of the patch table this module switches on (python -m inline_mm.env)
PATCHES = (
    Patch('fp32_predictions', 'BaseModel.val_step and test_step: their fp16 / bf16 prediction '
          'tensors returned in fp32', "test_cfg.fp16=True / val_cfg.fp16=True (autocast) stop in "
          "the metrics (mmdet's CocoMetric: 'Got unsupported ScalarType BFloat16'); the "
          'inferencers under torch.autocast alike', 'every mmengine', BY_ENGINE,
          always("mmengine's loops hand predictions made under autocast to the metrics as "
                 'they are'), installed, install),
)
