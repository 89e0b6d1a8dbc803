"""Pipeline steps that refuse a bad sample where it is read, naming its files.

Each costs one look at what the pipeline already holds (two shapes, or one pass over
a mask in memory), so the shipped configs run them by default:

- :class:`CheckSegMapSize`: a mask of another size than its image. mmseg trains on
  such a pair silently (``RandomResize`` stretches the mask over the image), and
  evaluation fails after the whole run with an ``IndexError`` about shapes.
- :class:`CheckSegLabels`: mask values outside ``0..num_classes-1`` and the ignore
  index. mmseg trains on them until the loss meets one (``IndexError: Target 7 is out
  of bounds``, naming no file), or not at all when the region is small; ``IoUMetric``
  drops them from its histograms without a word.
- :class:`CheckImageSize`: an image that leaves the pipeline smaller than the
  backbone's total stride. At test time nothing pads it to a crop size, and the
  backbone would refuse the batch without knowing which file it came from.

The mask checks step aside for samples that have no mask (``seg_map_path`` absent
or None): that is inference (``MMSegInferencer`` and ``inference_model`` drop
``LoadAnnotations`` from the test pipeline) or a dataset read without masks. A sample
with a mask path but no loaded mask means the step sits before ``LoadAnnotations``:
that is refused, since the check would otherwise pass without looking.

Registered in mmseg's ``TRANSFORMS`` (and ``CheckImageSize`` in mmdet's too) when the
frameworks are installed.
"""
from typing import Optional

import numpy as np
from mmcv.transforms import BaseTransform

from ..models.base import InLineBackbone
from ..models.registry import framework_registry

__all__ = ['CheckSegMapSize', 'CheckSegLabels', 'CheckImageSize']

#: at most this many wrong label values are named in one message (with pixel counts)
MAX_VALUES = 8


def _mask(results: dict, step: str) -> Optional[np.ndarray]:
    """The sample's loaded mask; None when the sample has no mask to check."""
    seg = results.get('gt_seg_map')
    if seg is not None:
        return seg
    if results.get('seg_map_path') is None:
        return None
    raise KeyError(f"{step}: the sample of {results.get('img_path')} has a mask file "
                   f"({results['seg_map_path']}) but no mask was loaded when {step} ran: put "
                   f"{step} after LoadAnnotations in the pipeline")


class CheckSegMapSize(BaseTransform):
    """Refuse a sample whose segmentation mask is not the size of its image.

    Place it after ``LoadAnnotations`` (in training pipelines before any resize): it
    compares the mask with the image's original size. Samples without a mask
    (inference) pass untouched. Takes no arguments.

    Raises:
        ValueError: naming both files and both sizes.
    """

    def transform(self, results: dict) -> dict:
        seg = _mask(results, 'CheckSegMapSize')
        if seg is None:
            return results
        hw = tuple(results['ori_shape'][:2])
        if tuple(seg.shape[:2]) != hw:
            raise ValueError(
                f"mask {results.get('seg_map_path')} is {seg.shape[0]}x{seg.shape[1]} (HxW) "
                f"but its image {results.get('img_path')} is {hw[0]}x{hw[1]}: a mask must "
                'label every pixel of its image. Fix or remove this pair '
                '(tools/misc/check_dataset.py lists all of them)')
        return results


class CheckSegLabels(BaseTransform):
    """Refuse a mask holding labels the model has no class for.

    Place it after ``LoadAnnotations``: the values it checks are the labels training
    uses (after ``reduce_zero_label`` and any ``label_map``), which must lie in
    ``0..num_classes-1`` or equal ``ignore_index``. One pass over the mask. Samples
    without a mask (inference) pass untouched.

    Args:
        num_classes (int): Classes of the decode head (``decode_head.num_classes``).
        ignore_index (int): The label that marks pixels to ignore (the heads' and the
            metric's ``ignore_index``). Default: 255.

    Raises:
        ValueError: naming the mask, the wrong values with their pixel counts, and
            ``num_classes``.
    """

    def __init__(self, num_classes: int, ignore_index: int = 255):
        if not isinstance(num_classes, int) or isinstance(num_classes, bool) \
                or num_classes < 1:
            raise ValueError(f'CheckSegLabels: num_classes must be a positive int (the decode '
                             f"head's num_classes), got {num_classes!r}")
        self.num_classes = num_classes
        self.ignore_index = int(ignore_index)

    def _wrong_values(self, seg: np.ndarray) -> dict:
        """label value -> pixels, for the values that are neither a class nor ignored."""
        if seg.dtype == np.uint8:       # mmseg's masks: one bincount pass
            counts = np.bincount(seg.ravel(), minlength=256)
            values = np.flatnonzero(counts)
            counts = counts[values]
        else:
            values, counts = np.unique(seg, return_counts=True)
        bad = ((values < 0) | (values >= self.num_classes)) & (values != self.ignore_index)
        return dict(zip(values[bad].tolist(), counts[bad].tolist()))

    def transform(self, results: dict) -> dict:
        seg = _mask(results, 'CheckSegLabels')
        if seg is None:
            return results
        wrong = self._wrong_values(seg)
        if wrong:
            shown = ', '.join(f'{v} ({n} px)' for v, n in sorted(wrong.items())[:MAX_VALUES])
            more = f' and {len(wrong) - MAX_VALUES} more' if len(wrong) > MAX_VALUES else ''
            file_values = ''
            if results.get('reduce_zero_label'):
                shifted = ', '.join(str(v + 1) for v in sorted(wrong)[:MAX_VALUES])
                file_values = (f' (values {shifted} in the file: reduce_zero_label=True '
                               'subtracts 1 and makes 0 the ignore index)')
            raise ValueError(
                f"mask {results.get('seg_map_path')} (image {results.get('img_path')}) holds "
                f'label values {shown}{more}{file_values}, but the model has num_classes='
                f'{self.num_classes} (labels 0..{self.num_classes - 1}) and ignore_index='
                f'{self.ignore_index}. Fix the mask, or num_classes / reduce_zero_label in the '
                'config (tools/misc/check_dataset.py lists every such mask)')
        return results

    def __repr__(self) -> str:
        return (f'{type(self).__name__}(num_classes={self.num_classes}, '
                f'ignore_index={self.ignore_index})')


class CheckImageSize(BaseTransform):
    """Refuse an image that leaves the pipeline smaller than the backbone takes.

    Place it after the last resize of a test pipeline. In training the data
    preprocessor pads every image to the crop size, so a small image is harmless
    there; at test time nothing pads it, and a batch of such images would reach the
    backbone below its total stride. The message names the file, its size on disk and
    its size after the pipeline.

    Args:
        min_size (int): Least height and width, in pixels. Default: the InLine
            backbones' total stride (32; InLine-DeiT needs only 16).

    Raises:
        ValueError: naming the file and both sizes.
    """

    def __init__(self, min_size: int = InLineBackbone.min_input_size):
        if not isinstance(min_size, int) or min_size < 1:
            raise ValueError(f'CheckImageSize: min_size must be a positive int, got '
                             f'{min_size!r}')
        self.min_size = min_size

    def transform(self, results: dict) -> dict:
        h, w = results['img'].shape[:2]
        if min(h, w) >= self.min_size:
            return results
        ori = results.get('ori_shape')
        what = results.get('img_path') or 'the image (given as an array)'
        was = (f'is {ori[0]}x{ori[1]} (HxW) and the pipeline makes it {h}x{w}'
               if ori is not None and tuple(ori[:2]) != (h, w) else f'is {h}x{w} (HxW)')
        raise ValueError(
            f'image {what} {was}: smaller than {self.min_size} px on a side, the least the '
            'backbone takes (its total stride). Leave such images out, pad them (a Pad step '
            f'with size_divisor={self.min_size}), or change the resize so that both sides '
            f'reach {self.min_size} px')

    def __repr__(self) -> str:
        return f'{type(self).__name__}(min_size={self.min_size})'


_SEG = framework_registry('mmseg', 'TRANSFORMS')
if _SEG is not None:
    for _step in (CheckSegMapSize, CheckSegLabels, CheckImageSize):
        _SEG.register_module(module=_step)
_DET = framework_registry('mmdet', 'TRANSFORMS')
if _DET is not None:
    _DET.register_module(module=CheckImageSize)
