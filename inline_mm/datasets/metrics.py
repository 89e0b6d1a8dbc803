"""mIoU evaluation that saves predicted masks as palette PNGs."""
import os
import os.path as osp
from typing import Sequence

from collections import OrderedDict

import numpy as np
from mmengine.dist import is_main_process
from mmengine.logging import MMLogger
from mmseg.evaluation import IoUMetric
from PIL import Image

__all__ = ['PaletteIoUMetric']


class PaletteIoUMetric(IoUMetric):
    """mmseg's ``IoUMetric`` whose saved predictions are palette PNGs.

    ``IoUMetric(output_dir=...)`` (what ``tools/test.py --out DIR`` sets) writes grey
    PNGs of class indices, which look black in an image viewer. This metric writes the
    same indices as palette-mode PNGs with the dataset's ``palette``: viewers show the
    class colours, and reading the file back (PIL, mmseg) still gives the indices.
    With ``reduce_zero_label`` datasets the saved value is the class index + 1 (the
    dataset's own numbering, as ``IoUMetric`` does) and value 0 is black.

    Args:
        output_dir (str, optional): Where ``<image stem>.png`` files are written.
            Default: None (nothing saved).
        format_only (bool): Only save predictions, compute no metric (images without
            masks). Default: False.
        **kwargs: Other arguments of ``IoUMetric`` (``ignore_index=255``,
            ``iou_metrics=['mIoU']``, ``nan_to_num``, ``beta``, ``prefix``, ...).
    """

    def __init__(self, output_dir=None, format_only: bool = False, **kwargs):
        super().__init__(output_dir=None, format_only=format_only, **kwargs)
        self.output_dir = output_dir
        if output_dir and is_main_process():
            os.makedirs(output_dir, exist_ok=True)

    def _flat_palette(self, reduce_zero_label: bool) -> list:
        palette = [list(p) for p in (self.dataset_meta or {}).get('palette') or []]
        if not palette:
            raise ValueError('PaletteIoUMetric needs dataset_meta["palette"] (from the '
                             "dataset's metainfo) to colour the saved masks")
        if reduce_zero_label:
            palette = [[0, 0, 0]] + palette
        flat = [int(c) for rgb in palette[:256] for c in rgb]
        return flat + [0] * (768 - len(flat))

    def process(self, data_batch: dict, data_samples: Sequence[dict]) -> None:
        output_dir, self.output_dir = self.output_dir, None    # parent must not save
        try:
            super().process(data_batch, data_samples)
        finally:
            self.output_dir = output_dir
        if output_dir is None:
            return
        for sample in data_samples:
            if self.format_only:
                self.results.append(None)           # counts saved masks
            pred = sample['pred_sem_seg']['data'].squeeze().cpu().numpy()
            reduce_zero_label = bool(sample.get('reduce_zero_label', False))
            if reduce_zero_label:
                pred = pred + 1
            im = Image.fromarray(pred.astype(np.uint8)).convert('P')
            im.putpalette(self._flat_palette(reduce_zero_label))
            stem = osp.splitext(osp.basename(sample['img_path']))[0]
            im.save(osp.join(output_dir, stem + '.png'))

    def compute_metrics(self, results: list) -> dict:
        logger = MMLogger.get_current_instance()
        if self.format_only:
            if self.output_dir:
                logger.info(f'{len(results)} predicted masks saved to {self.output_dir}')
            else:
                logger.warning('format_only=True but no output_dir: nothing was saved '
                               '(tools/test.py CONFIG CHECKPOINT --out DIR sets it)')
            return OrderedDict()
        metrics = super().compute_metrics(results)
        if self.output_dir:
            logger.info(f'predicted masks saved to {self.output_dir}')
        return metrics
