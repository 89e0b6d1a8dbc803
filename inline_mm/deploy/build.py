"""From a config (and checkpoint) to a deployable graph module and its ONNX file."""
import json
import os.path as osp
import warnings
from typing import Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn

from .common import NotExportable

__all__ = ['load_model', 'build_graph', 'export_graph', 'METADATA_KEY', 'read_metadata']

#: the ONNX ``metadata_props`` key holding what the runtime needs (JSON)
METADATA_KEY = 'inline_mm'


def _registry(scope: str):
    if scope == 'mmseg':
        from mmseg.registry import MODELS
    elif scope == 'mmdet':
        from mmdet.registry import MODELS
    else:
        raise NotExportable(f"the config's default_scope is {scope!r}: the export supports "
                            "mmdet (detectors) and mmseg (segmentors) configs")
    return MODELS


def _check_state(model: nn.Module, state: dict, checkpoint: str, config: str):
    """Refuse a checkpoint whose tensors do not fill ``model`` exactly, naming the
    mismatches (a checkpoint of another model, or of the backbone only)."""
    own = model.state_dict()
    state = {k[len('module.'):] if k.startswith('module.') else k: v for k, v in state.items()}
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    shapes = [f'{k}: checkpoint {tuple(state[k].shape)} vs model {tuple(v.shape)}'
              for k, v in own.items() if k in state and hasattr(state[k], 'shape')
              and tuple(state[k].shape) != tuple(v.shape)]
    if not (missing or unexpected or shapes):
        return state
    found = sum(1 for k in own if k in state)
    lines = [f'the checkpoint {checkpoint} is not a checkpoint of the model in {config}: '
             f'{found} of its {len(state)} tensors have names of the model\'s {len(own)}']
    if shapes:
        lines.append(f'{len(shapes)} have other shapes, e.g. ' + '; '.join(shapes[:3]))
    if missing:
        lines.append(f'{len(missing)} of the model\'s are missing, e.g. ' + ', '.join(missing[:3]))
    if unexpected:
        lines.append(f'{len(unexpected)} are not the model\'s, e.g. ' + ', '.join(unexpected[:3]))
    if found and all(k.startswith('backbone.') for k in own if k in state) and missing:
        lines.append('it holds a backbone only (ImageNet weights?): export a trained detector or '
                     'segmentor checkpoint, or the backbone alone without --whole')
    lines.append('pass the config the checkpoint was trained with')
    raise NotExportable('; '.join(lines))


def load_model(config, checkpoint: Optional[str] = None,
               cfg_options: Optional[dict] = None) -> Tuple[nn.Module, object]:
    """Build the model of an mmdet / mmseg ``config`` (a path or a ``Config``) in eval mode
    on the CPU and load ``checkpoint`` (an OpenMMLab checkpoint of this model: every tensor
    must fit, or a :class:`~.common.NotExportable` says which do not). The backbone's
    ``init_cfg`` is not applied (the checkpoint holds the trained weights). Returns
    ``(model, cfg)``."""
    import inline_mm  # noqa: F401  (registers the backbones, the checkpoint allowlist)
    from mmengine.config import Config
    from mmengine.model import revert_sync_batchnorm
    from mmengine.registry import DefaultScope
    from mmengine.runner import CheckpointLoader
    cfg = config if isinstance(config, Config) else Config.fromfile(str(config))
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    if cfg.model.get('backbone') is not None:
        cfg.model.backbone.init_cfg = None
    scope = cfg.get('default_scope', 'mmdet')
    with DefaultScope.overwrite_default_scope(scope):
        model = _registry(scope).build(cfg.model)
    model = revert_sync_batchnorm(model).eval()
    if checkpoint is not None:
        if not osp.isfile(str(checkpoint)):
            raise FileNotFoundError(f'checkpoint {checkpoint} not found')
        ckpt = CheckpointLoader.load_checkpoint(str(checkpoint), map_location='cpu')
        state = ckpt.get('state_dict', ckpt) if isinstance(ckpt, dict) else None
        if not isinstance(state, dict):
            raise NotExportable(f'{checkpoint} holds no state dict')
        if 'model' in state and isinstance(state['model'], dict) and 'state_dict' not in ckpt:
            raise NotExportable(f'{checkpoint} is an official ImageNet classification file, not '
                                'a trained detector or segmentor: export the backbone alone, '
                                'or train the config first')
        where = getattr(cfg, 'filename', 'the config')
        model.load_state_dict(_check_state(model, state, checkpoint, where))
        meta = ckpt.get('meta', {}) if isinstance(ckpt, dict) else {}
        classes = (meta.get('dataset_meta') or {}).get('classes')
        if classes:
            model.dataset_meta = {'classes': tuple(classes)}
    return model, cfg


def build_graph(model: nn.Module, size: Tuple[int, int]) -> nn.Module:
    """The deployable graph module of ``model`` for ``size = (H, W)`` input:
    :mod:`.detection` for mmdet detectors, :mod:`.segmentation` for mmseg segmentors."""
    try:
        from mmseg.models.segmentors import BaseSegmentor
    except ImportError:                          # mmdet-only installs
        BaseSegmentor = ()
    if BaseSegmentor and isinstance(model, BaseSegmentor):
        from .segmentation import segmentor_graph
        return segmentor_graph(model, size)
    from .detection import detector_graph
    return detector_graph(model, size)


def _example(graph: nn.Module, batch: int) -> Tuple[torch.Tensor, torch.Tensor]:
    h, w = graph.hw
    gen = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (batch, 3, h, w), generator=gen).float()
    sizes = torch.tensor([[h, w]] + [[max(1, h * 3 // 4), max(1, w * 2 // 3)]] * (batch - 1))
    return images, sizes


def export_graph(graph: nn.Module, path: str, opset: int = 17,
                 classes: Optional[Sequence[str]] = None, extra: Optional[dict] = None) -> str:
    """Export a graph module of :func:`build_graph` to ``path`` with the TorchScript-based
    ``torch.onnx.export`` (``dynamo=False``; docs/deploy.md says why): inputs ``input``
    and ``sizes`` with a free batch, outputs ``graph.output_names()``, and the runtime's
    metadata (task, size, output names, classes, the graph's own ``metadata()``, e.g. the
    mask threshold) under :data:`METADATA_KEY`."""
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
    meta = dict(task=graph.task, size=list(graph.hw), outputs=names, opset=opset,
                classes=list(classes) if classes else None, **own, **(extra or {}))
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
