"""From a model (:func:`inline_mm.apis.init_model`) to a deployable graph module and its ONNX
file."""
import json
import warnings
from typing import Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn


__all__ = ['build_graph', 'export_graph', 'METADATA_KEY', 'read_metadata']

#: the ONNX ``metadata_props`` key holding what the runtime needs (JSON)
METADATA_KEY = 'inline_mm'


def build_graph(model: nn.Module, size: Tuple[int, int], canvas: str = 'padded') -> nn.Module:
    """The deployable graph module of ``model`` for ``size = (H, W)`` input:
    :mod:`.detection` for mmdet detectors, :mod:`.segmentation` for mmseg segmentors.

    ``canvas`` (:data:`~.common.CANVASES`): ``'padded'``, batches of images of any size up to
    ``size``, each at the top left and computed as alone (the padding masked in every
    block); ``'filled'``, batches whose every image is ``size`` exactly, with none of
    those masks (faster; wrong for smaller images, which :class:`~.runtime.OnnxModel`
    refuses for such a file). :func:`export_graph` records it in the file."""
    try:
        from mmseg.models.segmentors import BaseSegmentor
    except ImportError:                          # mmdet-only installs
        BaseSegmentor = ()
    if BaseSegmentor and isinstance(model, BaseSegmentor):
        from .segmentation import segmentor_graph
        return segmentor_graph(model, size, canvas)
    from .detection import detector_graph
    return detector_graph(model, size, canvas)


def _example(graph: nn.Module, batch: int) -> Tuple[torch.Tensor, torch.Tensor]:
    h, w = graph.hw
    gen = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (batch, 3, h, w), generator=gen).float()
    small = [h, w] if graph.canvas == 'filled' else [max(1, h * 3 // 4), max(1, w * 2 // 3)]
    sizes = torch.tensor([[h, w]] + [small] * (batch - 1))
    return images, sizes


def export_graph(graph: nn.Module, path: str, opset: int = 17,
                 classes: Optional[Sequence[str]] = None, extra: Optional[dict] = None) -> str:
    """Export a graph module of :func:`build_graph` to ``path`` with the TorchScript-based
    ``torch.onnx.export`` (``dynamo=False``; docs/deploy.md says why): inputs ``input``
    and ``sizes`` with a free batch, outputs ``graph.output_names()``, and the runtime's
    metadata (task, size, canvas, output names, classes, the graph's own ``metadata()``,
    e.g. the mask threshold) under :data:`METADATA_KEY`."""
    import onnx
    if opset < 16:
        raise ValueError(f'opset {opset}: the graph needs RoiAlign with half_pixel and '
                         'GridSample-era ops of opset >= 16 (default 17)')
    names = graph.output_names()
    axes = {'input': {0: 'batch'}, 'sizes': {0: 'batch'}, **{n: {0: 'batch'} for n in names}}
    graph = graph.eval()
    with torch.no_grad(), warnings.catch_warnings():
        # sizes read while tracing are the graph's own (one graph per input size)
        warnings.simplefilter('ignore', torch.jit.TracerWarning)
        warnings.filterwarnings('ignore', message='.*torch.onnx.export.*deprecated.*')
        warnings.filterwarnings('ignore', message='Constant folding - Only steps=1')
        # (advanced indexing with indices that are never negative here)
        warnings.filterwarnings('ignore', message='Exporting aten::index operator')
        torch.onnx.export(graph, _example(graph, 2), path, input_names=['input', 'sizes'],
                          output_names=names, dynamic_axes=axes, opset_version=opset,
                          dynamo=False, do_constant_folding=True)
    proto = onnx.load(path)
    own = graph.metadata() if hasattr(graph, 'metadata') else {}
    meta = dict(task=graph.task, size=list(graph.hw), canvas=graph.canvas, outputs=names,
                opset=opset, classes=list(classes) if classes else None, **own, **(extra or {}))
    entry = proto.metadata_props.add()
    entry.key, entry.value = METADATA_KEY, json.dumps(meta)
    onnx.save(proto, path)
    return path


def read_metadata(path_or_proto: Union[str, object]) -> dict:
    """The :data:`METADATA_KEY` metadata of an exported file (``{}`` if it has none)."""
    import onnx
    proto = onnx.load(path_or_proto, load_external_data=False) \
        if isinstance(path_or_proto, str) else path_or_proto
    for entry in proto.metadata_props:
        if entry.key == METADATA_KEY:
            return json.loads(entry.value)
    return {}
