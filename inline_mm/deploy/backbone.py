"""Tracing and ONNX export of the InLine backbones, one input size per graph.

Size policy (decided): **a graph is exported for one input height and width, with a
free batch size.**  The backbones choose windows, shifts and padding in Python from
the map sizes, and a tracer records those choices as constants, so a graph traced
at 224x224 and run at 256x256 would not compute the model at 256x256 (as mmdeploy
does for Swin detectors, export once per deployed size).  Instead of being silently
wrong, a graph refuses any other size:

* :func:`trace_backbone` (``torch.jit.trace``): the graph starts with a scripted
  check that raises (``torch.jit.Error``, the TorchScript form of the
  ``RuntimeError``) ``... made for HxW input (any batch), got shape [...]``.
* :func:`export_onnx`: the ONNX input is declared ``(batch, C, H, W)`` with only
  ``batch`` symbolic, so ONNX Runtime refuses another size before running
  (``Got invalid dimensions for input: input ... Expected: H``); the graph also
  broadcasts the input against a ``(1, 1, H, W)`` zero constant, so a runtime that
  does not check declared shapes fails at that first ``Add`` instead of running on.

Padding (decided): **exported graphs are padding-unaware** (``pad_aware=False``
semantics). The backbones read each image's valid size from the trailing zero rows
and columns of the input, a data-dependent decision a tracer would freeze into the
example's constants; under tracing and export that reading is skipped, so a graph
computes over the whole input, as the plain model does (and ``valid_sizes`` refuses
to be traced). Export a graph per deployed size and feed it unpadded images, or
batches of one image size: then it computes exactly what the eager model computes.

Only torch is needed here (``onnx``/``onnxruntime`` for export and checking).
"""
import time
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from ..models.tracing import check_size

__all__ = ['SizeLocked', 'trace_backbone', 'export_onnx', 'run_onnx', 'check_onnx',
           'output_names']


class SizeLocked(nn.Module):
    """A backbone that refuses input of any height and width but ``size`` (what a
    traced or exported graph of it computes correctly).

    Args:
        backbone (nn.Module): The backbone (returns a tuple of maps).
        size (tuple[int, int]): ``(H, W)`` the graph is made for.
    """

    def __init__(self, backbone: nn.Module, size: Tuple[int, int]):
        super().__init__()
        self.backbone = backbone
        self.size = (int(size[0]), int(size[1]))

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        return tuple(self.backbone(check_size(x, *self.size)))


def _example(model: nn.Module, size: Tuple[int, int], batch: int) -> torch.Tensor:
    p = next(model.parameters())
    channels = getattr(model, 'in_channels', 3)
    return torch.randn(batch, channels, size[0], size[1], device=p.device, dtype=p.dtype)


def trace_backbone(model: nn.Module, size: Tuple[int, int],
                   batch: int = 2) -> torch.jit.ScriptModule:
    """``torch.jit.trace`` of ``model`` (in eval mode) for ``size = (H, W)`` input; any
    batch size runs, any other ``H, W`` raises."""
    model = model.eval()
    with torch.no_grad():
        return torch.jit.trace(SizeLocked(model, size).eval(), _example(model, size, batch),
                               check_trace=False)


def output_names(model: nn.Module) -> List[str]:
    """ONNX output names: ``out{i}`` for every index of ``model.out_indices``."""
    return [f'out{i}' for i in getattr(model, 'out_indices', range(4))]


def export_onnx(model: nn.Module, path: str, size: Tuple[int, int], opset: int = 17,
                batch: int = 2, names: Optional[Sequence[str]] = None) -> str:
    """Export ``model`` (eval mode; any module returning a tuple of tensors whose first
    axis is the batch) to ONNX for ``size = (H, W)`` input with a dynamic batch
    (TorchScript exporter, ``dynamo=False``). Input ``input``, outputs ``names``
    (default :func:`output_names`). Returns ``path``."""
    model = model.eval()
    names = list(names or output_names(model))
    axes = {'input': {0: 'batch'}, **{n: {0: 'batch'} for n in names}}
    with torch.no_grad():
        torch.onnx.export(SizeLocked(model, size).eval(), (_example(model, size, batch),), path,
                          input_names=['input'], output_names=names, dynamic_axes=axes,
                          opset_version=opset, dynamo=False, do_constant_folding=True)
    return path


def run_onnx(path: str, x: torch.Tensor, threads: Optional[int] = None) -> List[torch.Tensor]:
    """Run an exported graph with ONNX Runtime (CPU) on ``x``."""
    session = _session(path, threads)
    return [torch.from_numpy(o) for o in session.run(None, {'input': x.cpu().numpy()})]


def _session(path: str, threads: Optional[int] = None):
    import onnxruntime as ort
    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    return ort.InferenceSession(path, options, providers=['CPUExecutionProvider'])


def check_onnx(path: str, model: nn.Module, size: Tuple[int, int],
               batches: Sequence[int] = (1, 2), seed: int = 0) -> Dict[int, float]:
    """Max abs difference between ONNX Runtime and PyTorch eager on random input, per
    batch size."""
    model = model.eval()
    session = _session(path)
    gen = torch.Generator().manual_seed(seed)
    errors = {}
    for b in batches:
        x = torch.randn(b, getattr(model, 'in_channels', 3), size[0], size[1], generator=gen)
        with torch.no_grad():
            ref = model(x)
        got = session.run(None, {'input': x.numpy()})
        errors[b] = max(float((torch.from_numpy(g) - r).abs().max()) for g, r in zip(got, ref))
    return errors


def time_onnx_vs_eager(path: str, model: nn.Module, size: Tuple[int, int], batch: int = 1,
                       repeat: int = 10, threads: Optional[int] = None) -> Dict[str, float]:
    """Median seconds per forward: ONNX Runtime (CPU) and PyTorch eager, same input."""
    model = model.eval()
    session = _session(path, threads)
    x = torch.randn(batch, getattr(model, 'in_channels', 3), size[0], size[1])
    feed = {'input': x.numpy()}

    def median(fn):
        fn()
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return sorted(times)[len(times) // 2]

    with torch.no_grad():
        eager = median(lambda: model(x))
    return {'onnxruntime': median(lambda: session.run(None, feed)), 'eager': eager}
