"""Running an exported file with ONNX Runtime, and its outputs as mmdet / mmseg results.

    from inline_mm.deploy import OnnxModel
    model = OnnxModel('mask-rcnn_800x1344.onnx', threads=4)
    canvas, sizes = model.pad([img1, img2])        # (3, h, w) images that fit the graph
    outputs = model(canvas, sizes)                 # {'dets': ..., 'labels': ..., 'masks': ...}
    results = model.predict([img1, img2])          # one dict per image, cropped to it

Only ``onnxruntime`` (and numpy) is needed to run a file; the conversion to
``DetDataSample`` / ``SegDataSample`` (:func:`to_data_samples`) needs mmdet / mmseg.
"""
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .build import read_metadata

__all__ = ['OnnxModel', 'to_data_samples']


def _array(x) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, 'detach') else np.asarray(x)


class OnnxModel:
    """A file written by :func:`~.build.export_graph` in an ONNX Runtime session.

    Args:
        path (str): The ``.onnx`` file.
        threads (int, optional): Intra-op threads (default: ONNX Runtime's choice, all
            cores).
        providers (Sequence[str], optional): Execution providers (default: CPU).
    """

    def __init__(self, path: str, threads: Optional[int] = None,
                 providers: Optional[Sequence[str]] = None):
        import onnxruntime as ort
        self.path = path
        self.meta = read_metadata(path)
        if not self.meta:
            raise ValueError(f'{path} was not written by inline_mm.deploy (no {"inline_mm"!r} '
                             'metadata): export it with tools/deployment/export_onnx.py --whole')
        self.task = self.meta['task']
        self.size: Tuple[int, int] = tuple(self.meta['size'])
        self.output_names: List[str] = list(self.meta['outputs'])
        self.classes = self.meta.get('classes')
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = int(threads)
            options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(path, options,
                                            providers=list(providers or ['CPUExecutionProvider']))

    def __repr__(self) -> str:
        return (f'OnnxModel({self.path!r}, task={self.task!r}, size={self.size[0]}x'
                f'{self.size[1]}, outputs={self.output_names})')

    def pad(self, images: Sequence) -> Tuple[np.ndarray, np.ndarray]:
        """``(3, h, w)`` images (tensors or arrays, pixel values in the test pipeline's
        channel order, e.g. ``data['inputs']`` of the config's test dataloader) -> the
        ``(B, 3, H, W)`` float32 canvas with each image at the top left, and ``(B, 2)``
        sizes. An image larger than the graph's input is refused."""
        h, w = self.size
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
            canvas[i, :, :ih, :iw] = img
            sizes[i] = ih, iw
        return canvas, sizes

    def __call__(self, images, sizes) -> Dict[str, np.ndarray]:
        """Run the graph on a ``(B, 3, H, W)`` canvas and ``(B, 2)`` sizes: its outputs by
        name. The canvas must have the graph's height and width."""
        images = _array(images).astype(np.float32, copy=False)
        sizes = _array(sizes).astype(np.int64, copy=False)
        if images.ndim != 4 or tuple(images.shape[2:]) != self.size or images.shape[1] != 3:
            raise ValueError(f'input of shape {tuple(images.shape)}: this graph ({self.path}) '
                             f'takes (B, 3, {self.size[0]}, {self.size[1]}) images; pad smaller '
                             'images with OnnxModel.pad, resize larger ones, or export a graph '
                             'for another size (tools/deployment/export_onnx.py --size H W)')
        if sizes.shape != (images.shape[0], 2):
            raise ValueError(f'sizes of shape {tuple(sizes.shape)}: give one (h, w) per image, '
                             f'a ({images.shape[0]}, 2) array')
        bad = [tuple(s) for s in sizes
               if not (1 <= s[0] <= self.size[0] and 1 <= s[1] <= self.size[1])]
        if bad:
            raise ValueError(f'sizes {bad} do not fit the {self.size[0]}x{self.size[1]} input')
        out = self.session.run(self.output_names, {'input': images, 'sizes': sizes})
        return dict(zip(self.output_names, out))

    def predict(self, images: Sequence) -> List[Dict[str, np.ndarray]]:
        """Per image, its outputs cut to it: detectors ``boxes (n, 4)``, ``scores``,
        ``labels`` (and ``masks (n, h, w)``), segmentors ``seg (h, w)``; in the image's
        pixels (of the images given: map them back if you resized)."""
        canvas, sizes = self.pad(images)
        out = self(canvas, sizes)
        results = []
        for i, (h, w) in enumerate(sizes):
            if self.task == 'segmentation':
                results.append(dict(seg=out['seg'][i, :h, :w]))
                continue
            keep = out['labels'][i] >= 0
            r = dict(boxes=out['dets'][i, keep, :4], scores=out['dets'][i, keep, 4],
                     labels=out['labels'][i, keep])
            if 'masks' in out:
                r['masks'] = out['masks'][i, keep, :h, :w]
            results.append(r)
        return results


def _resize_to(x, shape, mode: str):
    """``(N, h, w)`` tensor -> ``(N, *shape)`` (``F.interpolate``)."""
    import torch.nn.functional as F
    if tuple(x.shape[-2:]) == tuple(shape):
        return x
    if not x.shape[0]:
        return x.new_zeros((0,) + tuple(shape))
    if mode == 'nearest':
        return F.interpolate(x[None].float(), size=tuple(shape), mode='nearest')[0].to(x.dtype)
    return F.interpolate(x[None].float(), size=tuple(shape), mode='bilinear',
                         align_corners=False)[0] >= 0.5


def to_data_samples(outputs: Dict[str, np.ndarray], sizes: np.ndarray,
                    data_samples: Sequence, task: str) -> list:
    """The outputs of a batch as mmdet's ``DetDataSample`` (``pred_instances``: boxes in the
    original image, divided by ``scale_factor``, masks at ``ori_shape``) or mmseg's
    ``SegDataSample`` (``pred_sem_seg`` at ``ori_shape``), copies of ``data_samples`` with
    the predictions added: what the model's ``test_step`` returns, for the evaluators. Where
    the test pipeline resized an image, masks are resized bilinearly and class maps by
    nearest neighbour (mmdet pastes masks and mmseg resizes logits at the original size:
    close, not identical)."""
    import torch
    out = []
    for i, ds in enumerate(data_samples):
        meta = ds.metainfo
        h, w = (int(v) for v in sizes[i])
        ori = tuple(meta.get('ori_shape', (h, w)))[:2]
        if task == 'segmentation':
            from mmengine.structures import PixelData
            seg = torch.from_numpy(np.ascontiguousarray(outputs['seg'][i, :h, :w]))[None]
            sample = ds.clone()
            sample.pred_sem_seg = PixelData(data=_resize_to(seg, ori, 'nearest'))
            out.append(sample)
            continue
        from mmengine.structures import InstanceData
        keep = outputs['labels'][i] >= 0
        dets = torch.from_numpy(outputs['dets'][i][keep])
        pred = InstanceData()
        scale = meta.get('scale_factor', (1., 1.))
        pred.bboxes = dets[:, :4] / dets.new_tensor(scale).repeat(2)
        pred.scores = dets[:, 4]
        pred.labels = torch.from_numpy(outputs['labels'][i][keep])
        if 'masks' in outputs:
            masks = torch.from_numpy(np.ascontiguousarray(outputs['masks'][i][keep, :h, :w]))
            pred.masks = _resize_to(masks, ori, 'bilinear')
        sample = ds.clone()
        sample.pred_instances = pred
        out.append(sample)
    return out
