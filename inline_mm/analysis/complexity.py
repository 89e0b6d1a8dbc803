"""Counting parameters and multiply-accumulates (MACs) of a model's forward pass.

The count runs at the PyTorch dispatcher (``torch.utils.flop_counter``), below
modules and functional calls: every ``mm``/``bmm``/``addmm``/``convolution`` that
actually executes is counted with its real shapes.  That is what InLine attention
needs.  Its products ``K^T V`` and ``Q (K^T V)`` are ``torch.matmul`` calls inside a
function, and its local term is a grouped ``F.conv2d`` with per-sample kernels, so
a counter that hooks ``nn.Linear``/``nn.Conv2d`` modules misses all three, and a
counter that hooks ``nn.Conv2d`` cannot see a depthwise conv run through
``F.conv2d`` either.

Units: one MAC is one multiply plus one add.  ``torch.utils.flop_counter`` reports
FLOPs as ``2 x MACs`` for these ops; we report MACs, which is the number that
mmdet/mmseg/fvcore model-zoo tables print under the heading "FLOPs", and
``flops = 2 * macs`` beside it.  Element-wise work (norms, activations, softmax,
additions) and custom C++ ops outside the dispatcher (mmcv's RoIAlign and NMS) are
not counted, as in those tables.

:func:`measure` applies the count to a config's whole model or backbone (the figures
``tools/analysis_tools/get_flops.py`` prints).
"""
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Tuple

import torch
import torch.nn as nn
from torch.utils.flop_counter import FlopCounterMode

__all__ = ['Complexity', 'count_macs', 'count_params', 'measure']


@dataclass
class Complexity:
    """Result of :func:`count_macs`.

    Attributes:
        macs (int): Multiply-accumulates of the whole call.
        by_module (dict[str, int]): MACs per submodule path of the model given to
            :func:`count_macs` (``'backbone'``, ``'backbone.layers.0'``, ...); ``''``
            is the whole model.
        by_op (dict[str, int]): MACs per aten op (``'aten.mm'``, ...).
    """
    macs: int
    by_module: Dict[str, int] = field(default_factory=dict)
    by_op: Dict[str, int] = field(default_factory=dict)

    @property
    def flops(self) -> int:
        """``2 * macs``: a multiply and an add counted separately."""
        return 2 * self.macs

    def module(self, path: str) -> int:
        """MACs of the submodule at ``path`` (0 if it did no counted work).

        A module whose own ``forward`` never ran (mmdet calls
        ``roi_head.forward(...)`` and ``rpn_head.predict(...)`` as methods, which
        bypasses the hooks that attribute work) is the sum of its outermost
        submodules that did run.
        """
        if path in self.by_module:
            return self.by_module[path]
        prefix = path + '.' if path else ''
        inner = [k for k in self.by_module if k.startswith(prefix) and k != path]
        outermost = [k for k in inner
                     if not any(k.startswith(o + '.') for o in inner if o != k)]
        return sum(self.by_module[k] for k in outermost)


def count_params(module: nn.Module) -> int:
    """Number of parameters (trainable or not) of ``module``."""
    return sum(p.numel() for p in module.parameters())


def count_macs(model: nn.Module, fn: Callable[[], Any]) -> Tuple[Any, Complexity]:
    """Run ``fn()`` under a MAC counter, ``model``'s InLine attention in its plain form
    (``impl='plain'`` for the call: the formula's products; the CPU kernel folds the qkv
    projection into others).

    Args:
        model (nn.Module): The model whose submodules the counts are attributed to;
            paths in :attr:`Complexity.by_module` are relative to it.
        fn (callable): Runs the forward pass to measure, e.g.
            ``lambda: model(x)``. It runs under ``torch.no_grad()``.

    Returns:
        tuple: ``(fn's return value, Complexity)``.
    """
    from ..models import using_impl
    root = type(model).__name__
    with torch.no_grad(), using_impl(model, 'plain'), FlopCounterMode(display=False) as counter:
        out = fn()
    counts = counter.get_flop_counts()
    # The counter names modules '<RootClass>.<path>' and calls the total 'Global';
    # every op it counts costs two FLOPs per MAC, so halving is exact.
    by_module = {}
    for name, ops in counts.items():
        if name == 'Global':
            continue
        path = '' if name == root else name[len(root) + 1:] if name.startswith(root + '.') else name
        by_module[path] = sum(ops.values()) // 2
    by_op = {str(op): n // 2 for op, n in counts.get('Global', {}).items()}
    total = counter.get_total_flops() // 2
    by_module.setdefault('', total)
    return out, Complexity(macs=total, by_module=by_module, by_op=by_op)


def _data_samples(scope, h, w):
    """Minimal per-image meta the heads read in tensor mode (no annotations)."""
    meta = dict(img_shape=(h, w), ori_shape=(h, w), pad_shape=(h, w),
                batch_input_shape=(h, w), scale_factor=(1., 1.))
    if scope == 'mmdet':
        from mmdet.structures import DetDataSample
        return [DetDataSample(metainfo=meta)]
    from mmseg.structures import SegDataSample
    return [SegDataSample(metainfo=meta)]


def measure(config, shape=(800, 1280), backbone_only=False, cfg_options=None) -> dict:
    """Params and MACs of ``config``'s model (mmdet or mmseg, random weights) on one
    ``3 x H x W`` image: ``dict(config, input, params, macs, parts={name: dict(params,
    macs)})`` and, for a two-stage detector, the ``proposals`` (and ``mask_rois``) its heads
    were measured on (what ``tools/analysis_tools/get_flops.py`` prints)."""
    from ..apis import init_model

    h, w = shape
    model = init_model(config, cfg_options=cfg_options)
    scope = model.cfg.default_scope
    torch.manual_seed(0)
    x = torch.randn(1, 3, h, w)
    result = dict(config=config, input=[1, 3, h, w])
    if backbone_only:
        _, c = count_macs(model.backbone, lambda: model.backbone(x))
        result.update(params=count_params(model.backbone), macs=c.macs,
                      parts={'backbone': dict(params=count_params(model.backbone), macs=c.macs)})
        return result
    samples = _data_samples(scope, h, w)
    out, c = count_macs(model, lambda: model(x, samples, mode='tensor'))
    parts = {}
    for name, child in model.named_children():
        if name == 'data_preprocessor':
            continue
        parts[name] = dict(params=count_params(child), macs=c.module(name))
    result.update(params=count_params(model), macs=c.macs, parts=parts)
    if scope == 'mmdet' and getattr(model, 'with_rpn', False):
        # roi_head outputs (cls_score, bbox_pred[, mask_preds]): rows = proposals kept;
        # a cascade's are lists with one tensor per image (one image here)
        def rows(t):
            return int((t[0] if isinstance(t, (list, tuple)) else t).shape[0])
        roi_out = out[-1]
        result['proposals'] = rows(roi_out[0])
        if len(roi_out) > 2:
            result['mask_rois'] = rows(roi_out[2])
    return result
