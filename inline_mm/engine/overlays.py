"""One overlay PNG per predicted image, for ``tools/test.py`` on a folder without annotations.

mmdet's ``DetVisualizationHook`` (``--show-dir``) writes under ``work_dir/<timestamp>/``, keeps
the input's extension (JPEG overlays, lossy), and draws the (empty) ground truth beside the
prediction. :class:`PredictionOverlayHook` writes ``<out_dir>/<image stem>.png``: the image as
training loads it (EXIF orientation applied) with the predicted boxes, masks, class names and
scores above ``score_thr``. The class names are the dataset's (``metainfo.classes``).

Like ``--show-dir``, a relative ``out_dir`` lies in the run's own folder,
``<work_dir>/<timestamp>/``, and so does the results file of a format-only metric of the
test evaluator (CocoMetric's ``outfile_prefix``): ``--work-dir`` moves both, and a second run
does not overwrite the first.
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
        out_dir (str): Folder for the PNGs (created). A relative path is taken in the run's
            folder ``<work_dir>/<timestamp>/``, and a relative ``outfile_prefix`` of a
            format-only metric of the test evaluator is moved there too. Default:
            ``'predictions/overlays'``.
        score_thr (float): Draw detections scoring at least this. Default: 0.3.
    """

    priority = 'LOW'

    def __init__(self, out_dir: str = 'predictions/overlays', score_thr: float = 0.3):
        if not 0 <= score_thr <= 1:
            raise ValueError(f'PredictionOverlayHook: score_thr must be in [0, 1], got {score_thr}')
        self.out_dir, self.score_thr = out_dir, score_thr
        self.written = 0

    def before_test(self, runner):
        self.dir = osp.join(runner.log_dir, self.out_dir)
        os.makedirs(self.dir, exist_ok=True)
        self.written, self.results = 0, []
        for metric in getattr(runner.test_loop.evaluator, 'metrics', []):
            prefix = getattr(metric, 'outfile_prefix', None)
            if getattr(metric, 'format_only', False) and prefix and not osp.isabs(prefix):
                metric.outfile_prefix = osp.join(runner.log_dir, prefix)
                os.makedirs(osp.dirname(metric.outfile_prefix), exist_ok=True)
                self.results.append(metric.outfile_prefix)

    def after_test_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        import mmcv
        from mmengine.fileio import get
        visualizer = runner.visualizer
        for sample in outputs or []:
            img = mmcv.imfrombytes(get(sample.img_path), channel_order='rgb')
            stem = osp.splitext(osp.basename(sample.img_path))[0]
            visualizer.add_datasample(stem, img, data_sample=sample, draw_gt=False,
                                      show=False, pred_score_thr=self.score_thr,
                                      out_file=osp.join(self.dir, f'{stem}.png'))
            self.written += 1

    def after_test(self, runner):
        files = ''.join(f'; results {p}.*.json' for p in self.results)
        runner.logger.info(f'PredictionOverlayHook: {self.written} overlay(s) in '
                           f'{self.dir}{files}')
