"""One overlay PNG per predicted image, for ``tools/test.py`` on a folder without annotations.

mmdet's ``DetVisualizationHook`` (``--show-dir``) writes under ``work_dir/<timestamp>/``, keeps
the input's extension (JPEG overlays, lossy), and draws the (empty) ground truth beside the
prediction. :class:`PredictionOverlayHook` writes ``<out_dir>/<image stem>.png``: the image as
training loads it (EXIF orientation applied) with the predicted boxes, masks, class names and
scores above ``score_thr``. The class names are the dataset's (``metainfo.classes``).
"""
import os
import os.path as osp

from mmengine.hooks import Hook
from mmengine.registry import HOOKS

__all__ = ['PredictionOverlayHook']


@HOOKS.register_module()
class PredictionOverlayHook(Hook):
    """Draw each test prediction over its image and save it as ``<out_dir>/<stem>.png``.

    Args:
        out_dir (str): Folder for the PNGs (created; relative paths are relative to the
            current directory, as ``work_dirs`` is).
        score_thr (float): Draw detections scoring at least this. Default: 0.3.
    """

    priority = 'LOW'

    def __init__(self, out_dir: str, score_thr: float = 0.3):
        if not 0 <= score_thr <= 1:
            raise ValueError(f'PredictionOverlayHook: score_thr must be in [0, 1], got {score_thr}')
        self.out_dir, self.score_thr = out_dir, score_thr
        self.written = 0

    def before_test(self, runner):
        os.makedirs(self.out_dir, exist_ok=True)
        self.written = 0

    def after_test_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        import mmcv
        from mmengine.fileio import get
        visualizer = runner.visualizer
        for sample in outputs or []:
            img = mmcv.imfrombytes(get(sample.img_path), channel_order='rgb')
            stem = osp.splitext(osp.basename(sample.img_path))[0]
            visualizer.add_datasample(stem, img, data_sample=sample, draw_gt=False,
                                      show=False, pred_score_thr=self.score_thr,
                                      out_file=osp.join(self.out_dir, f'{stem}.png'))
            self.written += 1

    def after_test(self, runner):
        runner.logger.info(f'PredictionOverlayHook: {self.written} overlay(s) in '
                           f'{osp.abspath(self.out_dir)}')
