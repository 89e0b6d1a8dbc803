"""``tools/test.py`` for an exported file: the config's test set through ONNX Runtime and
the config's evaluator, optionally next to the PyTorch model, with the per-detection (or
per-pixel) comparison of the two.

    from inline_mm.deploy import evaluate
    report = evaluate('CONFIG.py', 'model.onnx', checkpoint='model.pth')
    report['onnxruntime']   # {'coco/bbox_mAP': ..., ...}  (mIoU for segmentors)
    report['pytorch']       # the same metrics of model.test_step on the same batches
    report['parity']        # detections matched, worst box / score difference, mask IoU
    evaluate(..., runtime='openvino', precision='bf16')['openvino']     # OpenVINO's, in bf16
"""
from typing import Dict, List, Optional

import numpy as np

__all__ = ['evaluate', 'check_export', 'compare_outputs', 'random_batch', 'run_graph',
           'DetectionParity', 'SegmentationParity']


class DetectionParity:
    """Matches each image's detections of two runs (same label, box IoU >= 0.5, in the
    reference's score order) and keeps the worst differences of the matched pairs;
    ``names``: the reference run's and the other's, for the summary."""

    def __init__(self, names=('pytorch', 'onnxruntime')):
        self.names = names
        self.images = self.reference = self.other = self.matched = 0
        self.box = self.score = 0.
        self.mask_iou = 1.
        self.unmatched: List[dict] = []

    def add(self, refs, others):
        from mmdet.structures.bbox import bbox_overlaps
        for ref, got in zip(refs, others):
            r, g = ref.pred_instances, got.pred_instances
            self.images += 1
            self.reference += len(r)
            self.other += len(g)
            free = np.ones(len(g), bool)
            ious = bbox_overlaps(r.bboxes.float(), g.bboxes.float()).numpy() if len(r) and len(
                g) else np.zeros((len(r), len(g)))
            for i in range(len(r)):
                cand = free & (g.labels.numpy() == int(r.labels[i])) & (ious[i] >= 0.5)
                if not cand.any():
                    self.unmatched.append(dict(img_id=ref.metainfo.get('img_id'),
                                               label=int(r.labels[i]),
                                               score=float(r.scores[i]), side=self.names[0]))
                    continue
                j = int(np.argmax(np.where(cand, ious[i], -1)))
                free[j] = False
                self.matched += 1
                self.box = max(self.box, float((r.bboxes[i] - g.bboxes[j]).abs().max()))
                self.score = max(self.score, float((r.scores[i] - g.scores[j]).abs()))
                if 'masks' in r and 'masks' in g:
                    a, b = r.masks[i].bool(), g.masks[j].bool()
                    union = int((a | b).sum())
                    self.mask_iou = min(self.mask_iou,
                                        int((a & b).sum()) / union if union else 1.)
            for j in np.nonzero(free)[0]:
                self.unmatched.append(dict(img_id=got.metainfo.get('img_id'),
                                           label=int(g.labels[j]), score=float(g.scores[j]),
                                           side=self.names[1]))

    def summary(self) -> dict:
        return {'images': self.images, f'detections_{self.names[0]}': self.reference,
                f'detections_{self.names[1]}': self.other, 'matched': self.matched,
                'unmatched': self.unmatched, 'max_box_diff_px': self.box,
                'max_score_diff': self.score, 'min_mask_iou': self.mask_iou}


class SegmentationParity:
    """The share of pixels whose class two runs agree on, worst image and overall."""

    def __init__(self):
        self.pixels = self.same = 0
        self.worst = 1.
        self.images = 0

    def add(self, refs, others):
        for ref, got in zip(refs, others):
            a, b = ref.pred_sem_seg.data, got.pred_sem_seg.data
            same = int((a == b).sum())
            self.pixels += a.numel()
            self.same += same
            self.worst = min(self.worst, same / a.numel())
            self.images += 1

    def summary(self) -> dict:
        return dict(images=self.images, pixel_agreement=self.same / max(self.pixels, 1),
                    worst_image_agreement=self.worst)


def evaluate(config, onnx_path: str, checkpoint: Optional[str] = None, model=None,
             threads: Optional[int] = None, cfg_options: Optional[dict] = None,
             runtime: str = 'onnxruntime', precision: Optional[str] = None) -> Dict:
    """Run the ``config``'s test dataloader through the exported file and its test
    evaluator (what ``tools/test.py`` does with the PyTorch model); with ``checkpoint`` (or
    a built ``model``) also the PyTorch model on the same batches and the comparison.
    ``runtime`` and ``precision``: :class:`~.runtime.OnnxModel`'s (e.g. ``'openvino'``,
    ``'bf16'``).

    Returns ``{runtime: metrics, 'pytorch': metrics or None, 'parity': dict or None}``
    (``runtime`` is ``'onnxruntime'`` by default)."""
    import torch
    from mmengine.evaluator import Evaluator
    from mmengine.registry import DefaultScope
    from mmengine.runner import Runner

    from ..apis import init_model, read_config
    from .runtime import OnnxModel, to_data_samples
    cfg = read_config(config, cfg_options)
    if model is None and checkpoint is not None:
        model = init_model(cfg, checkpoint)
    name = runtime
    runtime = OnnxModel(onnx_path, threads=threads, runtime=runtime, precision=precision)
    scope = cfg.get('default_scope', 'mmdet')
    expected = 'segmentation' if scope == 'mmseg' else 'detection'
    if runtime.task != expected:
        raise ValueError(f'{onnx_path} holds a {runtime.task} model, the config a {expected} '
                         'one: pass the config the file was exported from')
    with DefaultScope.overwrite_default_scope(scope):
        loader = Runner.build_dataloader(cfg.test_dataloader)
        evaluators = {name: Evaluator(cfg.test_evaluator)}
        if model is not None:
            evaluators['pytorch'] = Evaluator(cfg.test_evaluator)
        for e in evaluators.values():
            e.dataset_meta = loader.dataset.metainfo
        parity = (SegmentationParity() if expected == 'segmentation'
                  else DetectionParity(('pytorch', name))) if model is not None else None
        for data in loader:
            canvas, sizes = runtime.pad(data['inputs'])
            got = to_data_samples(runtime(canvas, sizes), sizes, data['data_samples'],
                                  runtime.task, runtime.mask_thr_binary)
            evaluators[name].process(data_samples=got, data_batch=data)
            if model is not None:
                with torch.no_grad():
                    ref = model.test_step(data)
                evaluators['pytorch'].process(data_samples=ref, data_batch=data)
                parity.add(ref, got)
        n = len(loader.dataset)
        metrics = {k: e.evaluate(n) for k, e in evaluators.items()}
    return {name: metrics[name], 'pytorch': metrics.get('pytorch'),
            'parity': parity.summary() if parity is not None else None}


def compare_outputs(reference: Dict[str, np.ndarray], other: Dict[str, np.ndarray],
                    sizes: np.ndarray, task: str, names=('pytorch', 'onnxruntime'),
                    mask_thr_binary: float = 0.5) -> dict:
    """Two runs' raw outputs of one batch (the graph's output names -> arrays; ``sizes``
    ``(B, 2)``), compared as :class:`DetectionParity` or :class:`SegmentationParity` (masks
    pasted with ``mask_thr_binary``): the summary."""
    if task == 'segmentation':
        from mmseg.structures import SegDataSample
        samples = [SegDataSample(metainfo=dict(img_shape=tuple(s), ori_shape=tuple(s)))
                   for s in sizes.tolist()]
        parity = SegmentationParity()
    else:
        from mmdet.structures import DetDataSample
        samples = [DetDataSample(metainfo=dict(img_shape=tuple(s), ori_shape=tuple(s),
                                               scale_factor=(1., 1.)))
                   for s in sizes.tolist()]
        parity = DetectionParity(names)
    from .runtime import to_data_samples
    parity.add(to_data_samples(reference, sizes, samples, task, mask_thr_binary),
               to_data_samples(other, sizes, samples, task, mask_thr_binary))
    return parity.summary()


def random_batch(size, batch: int = 2, seed: int = 0, filled: bool = False) -> list:
    """``batch`` random ``(3, h, w)`` images for a graph of ``size``: the first fills it,
    the others are smaller (a padded batch), or with ``filled`` all fill it."""
    import torch
    h, w = size
    gen = torch.Generator().manual_seed(seed)
    shapes = [(h, w)] + [(h, w) if filled else
                         (max(32, h * (3 + i % 2) // 5), max(32, w * (4 - i % 2) // 5))
                         for i in range(batch - 1)]
    return [torch.randint(0, 256, (3, ih, iw), generator=gen).float() for ih, iw in shapes]


def run_graph(graph, canvas: np.ndarray, sizes: np.ndarray) -> Dict[str, np.ndarray]:
    """The graph module in PyTorch on a padded batch: its outputs by name."""
    import torch
    with torch.no_grad():
        out = graph(torch.from_numpy(canvas), torch.from_numpy(sizes))
    out = out if isinstance(out, (tuple, list)) else (out,)
    return dict(zip(graph.output_names(), (o.numpy() for o in out)))


def check_export(graph, onnx_path: str, batch: int = 2, seed: int = 0,
                 threads: Optional[int] = None) -> dict:
    """ONNX Runtime against the graph module in PyTorch on a padded batch of random
    images (:func:`random_batch`; for a ``'filled'`` graph, images that fill it): the
    comparison summary (:func:`compare_outputs`)."""
    from .runtime import OnnxModel
    runtime = OnnxModel(onnx_path, threads=threads)
    canvas, sizes = runtime.pad(random_batch(runtime.size, batch, seed,
                                             runtime.canvas == 'filled'))
    return compare_outputs(run_graph(graph, canvas, sizes), runtime(canvas, sizes), sizes,
                           runtime.task, mask_thr_binary=runtime.mask_thr_binary)
