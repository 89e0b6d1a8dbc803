"""Running an exported file with ONNX Runtime (or OpenVINO), and its outputs as mmdet / mmseg
results.

    from inline_mm.deploy import OnnxModel
    model = OnnxModel('mask-rcnn_800x1344.onnx', threads=4)
    canvas, sizes = model.pad([img1, img2])        # (3, h, w) images that fit the graph
    outputs = model(canvas, sizes)                 # {'dets': ..., 'labels': ..., 'masks': ...}
    results = model.results(outputs, sizes)        # one dict per image, masks pasted
    results = model.predict([img1, img2])          # the three steps above

Mask R-CNN files give each detection's ``M x M`` mask probabilities (``masks`` ``(N, M, M)``,
one row per detection of the batch, in the order of ``dets[labels >= 0]``);
:func:`paste_masks` (``OnnxModel.paste_masks``) pastes them into an image as mmdet does.

A file exported with ``canvas='filled'`` takes batches whose every image fills its canvas
(``OnnxModel.canvas``; smaller images are refused). ``OnnxModel(path, runtime='openvino',
precision='bf16')`` runs the same file in OpenVINO (the ``openvino`` extra).

Only ``onnxruntime`` (and numpy) is needed to run a file; the conversion to
``DetDataSample`` / ``SegDataSample`` (:func:`to_data_samples`) needs mmdet / mmseg.
"""
import warnings
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .build import read_metadata

__all__ = ['OnnxModel', 'to_data_samples', 'paste_masks', 'detections', 'RUNTIMES']

#: the runtimes :class:`OnnxModel` runs a file in -> the precisions it takes (the first: the
#: default)
RUNTIMES = {'onnxruntime': (None,), 'openvino': ('f32', 'bf16', 'f16')}


def _array(x) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, 'detach') else np.asarray(x)


def _paste_weights(lo: np.float32, hi: np.float32, n_img: int, n_mask: int):
    """The pixels ``start:stop`` of an ``n_img`` image row that mmdet's paste computes for
    a box spanning ``[lo, hi]`` (``floor(lo) - 1`` to ``ceil(hi) + 1``, within the image)
    and their ``(stop - start, n_mask)`` bilinear weights on the mask's row (``grid_sample``,
    ``align_corners=False``, zero padding), in float32 as mmdet computes them."""
    start = max(int(np.floor(lo)) - 1, 0)
    stop = max(min(int(np.ceil(hi)) + 1, n_img), start)
    px = np.arange(start, stop, dtype=np.float32) + np.float32(0.5)
    with np.errstate(divide='ignore', invalid='ignore'):
        g = (px - lo) / (hi - lo) * np.float32(2) - np.float32(1)
    g[np.isinf(g)] = 0
    src = ((g + np.float32(1)) * np.float32(n_mask) - np.float32(1)) / np.float32(2)
    i0 = np.floor(src)
    l1 = src - i0
    j = np.arange(n_mask, dtype=np.float32)[None, :]
    w = ((j == i0[:, None]) * (1 - l1)[:, None] + (j == i0[:, None] + 1) * l1[:, None])
    return start, stop, w.astype(np.float32)


def paste_masks(masks, boxes, shape: Tuple[int, int],
                threshold: Optional[float] = 0.5) -> np.ndarray:
    """``(n, M, M)`` mask probabilities (the ``masks`` output) pasted into their ``(n, 4)``
    boxes on an image of ``shape`` ``(h, w)``: ``(n, h, w)``, bool (``>= threshold``, the
    model's ``mask_thr_binary``) or the float32 probabilities (``threshold=None``).

    mmdet's ``_do_paste_mask`` on CPU: ``grid_sample`` (bilinear, zero padding) of each
    mask over its box's window of pixels, here in its separable form (two small matrix
    products). For mmdet's results at the original image size, give the boxes divided by
    the scale factor and the original shape (:func:`detections` does)."""
    masks = np.asarray(_array(masks), np.float32)
    boxes = np.asarray(_array(boxes), np.float32).reshape(-1, 4)
    h, w = int(shape[0]), int(shape[1])
    out = np.zeros((len(masks), h, w), np.float32 if threshold is None else bool)
    for i, (mask, box) in enumerate(zip(masks, boxes)):
        r0, r1, rows = _paste_weights(box[1], box[3], h, mask.shape[0])
        c0, c1, cols = _paste_weights(box[0], box[2], w, mask.shape[1])
        if r1 > r0 and c1 > c0:
            window = rows @ mask @ cols.T
            out[i, r0:r1, c0:c1] = window if threshold is None else window >= threshold
    return out


def detections(outputs: Dict[str, np.ndarray], sizes, scale_factors=None, shapes=None,
               mask_thr_binary: float = 0.5) -> List[Dict[str, np.ndarray]]:
    """A detector's outputs of a batch, per image: ``boxes (n, 4)``, ``scores``, ``labels``
    and (Mask R-CNN) ``masks (n, h, w)`` bool pasted at ``shapes[i]`` (default: the
    image's ``sizes[i]``). With ``scale_factors`` (mmdet's ``(w, h)`` per image) boxes are
    divided by them first, as mmdet's ``rescale=True``: give the original shapes too, and
    the masks are what mmdet pastes at the original size."""
    labels = np.asarray(outputs['labels'])
    kept = labels >= 0
    starts = np.concatenate([[0], np.cumsum(kept.sum(1))])
    results = []
    for i in range(len(labels)):
        keep = kept[i]
        boxes = np.asarray(outputs['dets'][i, keep, :4], np.float32)
        if scale_factors is not None:
            boxes = boxes / np.tile(np.asarray(scale_factors[i], np.float32)[:2], 2)
        r = dict(boxes=boxes, scores=outputs['dets'][i, keep, 4], labels=labels[i, keep])
        if 'masks' in outputs:
            shape = (shapes if shapes is not None else sizes)[i]
            r['masks'] = paste_masks(outputs['masks'][starts[i]:starts[i + 1]], boxes,
                                     tuple(int(v) for v in shape[:2]), mask_thr_binary)
        results.append(r)
    return results


def _openvino(path: str, threads: Optional[int], precision: str):
    """The file compiled by OpenVINO for the CPU: a function of the feed -> outputs by name."""
    try:
        import openvino as ov
    except ImportError:
        raise ImportError("runtime='openvino' needs the openvino package: pip install "
                          "'inline_mm[openvino]' (docs/deploy.md)") from None
    config = {'INFERENCE_PRECISION_HINT': precision}
    if threads:
        config['INFERENCE_NUM_THREADS'] = int(threads)
    core = ov.Core()
    compiled = core.compile_model(core.read_model(path), 'CPU', config)
    ports = {name: o for o in compiled.outputs for name in o.get_names()}

    def run(names, feed):
        out = compiled(feed)
        return [out[ports[n]] for n in names]
    return run


class OnnxModel:
    """A file written by :func:`~.build.export_graph` in an ONNX Runtime session (or
    compiled by OpenVINO).

    Args:
        path (str): The ``.onnx`` file.
        threads (int, optional): Intra-op threads (default: the runtime's choice, all
            cores).
        providers (Sequence[str], optional): ONNX Runtime's execution providers (default:
            CPU).
        runtime (str): ``'onnxruntime'`` or ``'openvino'`` (its CPU plugin; the
            ``openvino`` extra). Default: ``'onnxruntime'``.
        precision (str, optional): OpenVINO's ``INFERENCE_PRECISION_HINT``: ``'f32'``
            (the default here; OpenVINO's own default on a CPU with bf16 units is bf16),
            ``'bf16'`` or ``'f16'``. ONNX Runtime runs the file's fp32.
    """

    def __init__(self, path: str, threads: Optional[int] = None,
                 providers: Optional[Sequence[str]] = None, runtime: str = 'onnxruntime',
                 precision: Optional[str] = None):
        if runtime not in RUNTIMES:
            raise ValueError(f'runtime={runtime!r}: choose among {", ".join(RUNTIMES)}')
        if precision is not None and precision not in RUNTIMES[runtime]:
            offered = [p for p in RUNTIMES[runtime] if p]
            raise ValueError(f'precision={precision!r} for {runtime}: ' + (
                'choose among ' + ', '.join(map(repr, offered)) if offered else
                "it runs the file's fp32; precisions are OpenVINO's (runtime='openvino')"))
        if providers is not None and runtime != 'onnxruntime':
            raise ValueError('providers are ONNX Runtime\'s: not for runtime='
                             f'{runtime!r}')
        self.path = path
        self.meta = read_metadata(path)
        if not self.meta:
            raise ValueError(f'{path} was not written by inline_mm.deploy (no {"inline_mm"!r} '
                             'metadata): export it with tools/deployment/export_onnx.py --whole')
        self.task = self.meta['task']
        self.size: Tuple[int, int] = tuple(self.meta['size'])
        #: ``'padded'`` (any image up to :attr:`size`) or ``'filled'`` (every image of
        #: :attr:`size`): what the file was exported for (older files: padded)
        self.canvas: str = self.meta.get('canvas', 'padded')
        self.output_names: List[str] = list(self.meta['outputs'])
        self.classes = self.meta.get('classes')
        if 'masks' in self.output_names and 'mask_thr_binary' not in self.meta:
            raise ValueError(f'{path} was exported by an older inline_mm (masks on the canvas): '
                             'export it again (tools/deployment/export_onnx.py --whole)')
        #: the threshold of :meth:`paste_masks` (the config's ``mask_thr_binary``)
        self.mask_thr_binary = float(self.meta.get('mask_thr_binary', 0.5))
        self.runtime = runtime
        self.precision = precision or RUNTIMES[runtime][0]
        if runtime == 'openvino':
            self.session = None
            self._run = _openvino(path, threads, self.precision)
            return
        import onnxruntime as ort
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = int(threads)
            options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(path, options,
                                            providers=list(providers or ['CPUExecutionProvider']))
        self._run = self.session.run

    def __repr__(self) -> str:
        how = self.runtime + (f', precision={self.precision!r}' if self.precision else '')
        return (f'OnnxModel({self.path!r}, task={self.task!r}, size={self.size[0]}x'
                f'{self.size[1]}, canvas={self.canvas!r}, outputs={self.output_names}, '
                f'runtime={how})')

    def _filled(self, where: str) -> str:
        return (f'{where}: this graph ({self.path}) was exported for images that fill its '
                f'{self.size[0]}x{self.size[1]} canvas (canvas=\'filled\': no padding masks); '
                'resize every image to that size, or export the padded graph (export_onnx.py '
                '--whole without --canvas filled) for smaller images')

    def pad(self, images: Sequence) -> Tuple[np.ndarray, np.ndarray]:
        """``(3, h, w)`` images (tensors or arrays, pixel values in the test pipeline's
        channel order, e.g. ``data['inputs']`` of the config's test dataloader) -> the
        ``(B, 3, H, W)`` float32 canvas with each image at the top left, and ``(B, 2)``
        sizes. An image larger than the graph's input is refused."""
        h, w = self.size
        if not len(images):
            raise ValueError(self._empty())
        canvas = np.zeros((len(images), 3, h, w), np.float32)
        sizes = np.zeros((len(images), 2), np.int64)
        for i, img in enumerate(images):
            img = _array(img)
            if img.ndim != 3 or img.shape[0] != 3:
                raise ValueError(f'image {i} has shape {tuple(img.shape)}: give (3, h, w) '
                                 'images (channels first), as the test pipeline packs them')
            ih, iw = img.shape[1:]
            if ih > h or iw > w:
                raise ValueError(f'image {i} is {ih}x{iw}, larger than the {h}x{w} input this '
                                 f'graph ({self.path}) was exported for: resize it to fit (the '
                                 "config's test pipeline Resize does), or export a graph for a "
                                 'larger size (tools/deployment/export_onnx.py --size H W)')
            if self.canvas == 'filled' and (ih, iw) != (h, w):
                raise ValueError(self._filled(f'image {i} is {ih}x{iw}'))
            canvas[i, :, :ih, :iw] = img
            sizes[i] = ih, iw
        return canvas, sizes

    def _empty(self) -> str:
        return (f'an empty batch: this graph ({self.path}) takes input (B, 3, {self.size[0]}, '
                f'{self.size[1]}) and sizes (B, 2) with B >= 1; give at least one image')

    def __call__(self, images, sizes) -> Dict[str, np.ndarray]:
        """Run the graph on a ``(B, 3, H, W)`` canvas and ``(B, 2)`` sizes: its outputs by
        name. The canvas must have the graph's height and width; pixel values within 0-1
        are warned about (the graph expects 0-255 and normalises them itself)."""
        images = _array(images).astype(np.float32, copy=False)
        sizes = _array(sizes).astype(np.int64, copy=False)
        if images.ndim != 4 or tuple(images.shape[2:]) != self.size or images.shape[1] != 3:
            raise ValueError(f'input of shape {tuple(images.shape)}: this graph ({self.path}) '
                             f'takes (B, 3, {self.size[0]}, {self.size[1]}) images; pad smaller '
                             'images with OnnxModel.pad, resize larger ones, or export a graph '
                             'for another size (tools/deployment/export_onnx.py --size H W)')
        if not images.shape[0]:
            raise ValueError(self._empty())
        if sizes.shape != (images.shape[0], 2):
            raise ValueError(f'sizes of shape {tuple(sizes.shape)}: give one (h, w) per image, '
                             f'a ({images.shape[0]}, 2) array')
        bad = [tuple(s) for s in sizes
               if not (1 <= s[0] <= self.size[0] and 1 <= s[1] <= self.size[1])]
        if bad:
            raise ValueError(f'sizes {bad} do not fit the {self.size[0]}x{self.size[1]} input')
        if self.canvas == 'filled':
            small = [tuple(int(v) for v in s) for s in sizes if tuple(s) != self.size]
            if small:
                raise ValueError(self._filled(f'sizes {small}'))
        top = float(images.max())
        if 0 < top <= 1:
            warnings.warn(f'the pixel values lie within 0-1 (largest {top:.3g}): this graph takes '
                          "them as the config's test pipeline loads them (0-255) and normalises "
                          'them itself; scaled to 0-1, images give no detections (or wrong '
                          'classes)', stacklevel=2)
        out = self._run(self.output_names, {'input': images, 'sizes': sizes})
        return dict(zip(self.output_names, out))

    def paste_masks(self, masks, boxes, shape: Tuple[int, int]) -> np.ndarray:
        """``(n, M, M)`` rows of the ``masks`` output pasted into their boxes on an image of
        ``shape``: ``(n, h, w)`` bool, with this model's ``mask_thr_binary``
        (:func:`paste_masks`)."""
        return paste_masks(masks, boxes, shape, self.mask_thr_binary)

    def results(self, outputs: Dict[str, np.ndarray], sizes, scale_factors=None,
                shapes=None) -> List[Dict[str, np.ndarray]]:
        """The outputs of a batch per image (:func:`detections` for detectors, masks pasted
        with this model's threshold; segmentors: ``seg (h, w)`` cut to each image)."""
        if self.task == 'segmentation':
            return [dict(seg=outputs['seg'][i, :h, :w]) for i, (h, w) in enumerate(sizes)]
        return detections(outputs, sizes, scale_factors, shapes, self.mask_thr_binary)

    def predict(self, images: Sequence) -> List[Dict[str, np.ndarray]]:
        """Per image, its results: detectors ``boxes (n, 4)``, ``scores``, ``labels`` (and
        ``masks (n, h, w)`` bool, pasted), segmentors ``seg (h, w)``; in the image's pixels
        (of the images given: for the original image's, use :meth:`results` with the scale
        factors and original shapes)."""
        canvas, sizes = self.pad(images)
        return self.results(self(canvas, sizes), sizes)


def _resize_nearest(x, shape):
    """``(1, h, w)`` class map -> ``(1, *shape)`` (``F.interpolate``, nearest)."""
    import torch.nn.functional as F
    if tuple(x.shape[-2:]) == tuple(shape):
        return x
    return F.interpolate(x[None].float(), size=tuple(shape), mode='nearest')[0].to(x.dtype)


def to_data_samples(outputs: Dict[str, np.ndarray], sizes: np.ndarray,
                    data_samples: Sequence, task: str, mask_thr_binary: float = 0.5) -> list:
    """The outputs of a batch as mmdet's ``DetDataSample`` (``pred_instances``: boxes in the
    original image, divided by ``scale_factor``, masks pasted at ``ori_shape`` with those
    boxes, as mmdet's ``rescale=True``) or mmseg's ``SegDataSample`` (``pred_sem_seg`` at
    ``ori_shape``), copies of ``data_samples`` with the predictions added: what the model's
    ``test_step`` returns, for the evaluators. Where the test pipeline resized an image,
    class maps are resized by nearest neighbour (mmseg resizes the logits at the original
    size: close, not identical)."""
    import torch
    metas = [ds.metainfo for ds in data_samples]
    oris = [tuple(m.get('ori_shape', tuple(int(v) for v in sizes[i])))[:2]
            for i, m in enumerate(metas)]
    if task == 'segmentation':
        from mmengine.structures import PixelData
        out = []
        for i, ds in enumerate(data_samples):
            h, w = (int(v) for v in sizes[i])
            seg = torch.from_numpy(np.ascontiguousarray(outputs['seg'][i, :h, :w]))[None]
            sample = ds.clone()
            sample.pred_sem_seg = PixelData(data=_resize_nearest(seg, oris[i]))
            out.append(sample)
        return out
    from mmengine.structures import InstanceData
    scales = [m.get('scale_factor', (1., 1.)) for m in metas]
    out = []
    for ds, r in zip(data_samples, detections(outputs, sizes, scales, oris, mask_thr_binary)):
        pred = InstanceData()
        pred.bboxes = torch.from_numpy(r['boxes'])
        pred.scores = torch.from_numpy(np.ascontiguousarray(r['scores']))
        pred.labels = torch.from_numpy(np.ascontiguousarray(r['labels']))
        if 'masks' in r:
            pred.masks = torch.from_numpy(r['masks'])
        sample = ds.clone()
        sample.pred_instances = pred
        out.append(sample)
    return out
