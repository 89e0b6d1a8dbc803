"""What the backbones do under the tracers: ``torch.jit.trace`` / ONNX export, FX.

**Traced graphs refuse other sizes.** The backbones choose windows, shifts, stripe
widths, padding and position-table sizes in Python from the map size, and
``torch.jit.trace`` and the TorchScript ONNX exporter record those choices as
constants: a graph traced at 224x448 and run at 448x224 (same token count) would run
and be wrong by several percent. :func:`size_guard` puts the refusal into the graph
itself, at its input, so a plain ``torch.jit.trace(backbone, x)`` or
``torch.onnx.export(backbone, x, ...)`` raises at any other height or width (the
batch stays free), whatever wraps it.

**FX sees blocks as leaves.** ``torch.fx.symbolic_trace`` gives no sizes at all, so
the Python decisions on sizes cannot be made while tracing. The modules that make
them are marked :func:`fx_leaf`: under FX each call becomes one ``call_function``
node that runs the module at graph run time, where sizes are known. Every other
part of a backbone (stems, stage loops, output norms and layout) is traced op by op,
so ``torchvision``'s ``create_feature_extractor`` can pick stage outputs. FX graphs
are padding-unaware (``pad_aware=False`` semantics, as exported graphs), and run
without gradient checkpointing.

**``torch.jit.script`` is not supported** (the size decisions use Python that
TorchScript does not compile); :func:`refuse_script` says so instead of a compiler
error deep inside a block.
"""
import functools
import inspect
import warnings

import torch
import torch.fx

from .padding import NO_PADDING

__all__ = ['check_size', 'size_guard', 'fx_leaf', 'is_fx_proxy', 'refuse_script']

#: what a graph made for one input size says to another size (``.format(h, w, shape)``)
SIZE_ERROR = ('this graph of an InLine backbone was made for {}x{} input (any batch), got shape '
              '{}: the windows, shifts and padding are recorded for that size; make one graph '
              'per input size (inline_mm.deploy.backbone)')


@functools.lru_cache(maxsize=None)
def _scripted_check():
    @torch.jit.script       # on first use, not at import: a TorchScript compile takes ~0.1 s
    def check(x: torch.Tensor, h: int, w: int, error: str) -> torch.Tensor:
        if x.dim() != 4 or x.size(2) != h or x.size(3) != w:
            raise RuntimeError(error.format(h, w, list(x.shape)))
        return x
    return check


def check_size(x: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """``x`` if it is a ``(B, C, h, w)`` batch, else a ``RuntimeError``: the one size check of
    traced, exported and size-locked graphs. Traced: a scripted check (``torch.jit.Error``);
    exported to ONNX (no raise there): a broadcast against a ``(1, 1, h, w)`` zero constant."""
    if torch.onnx.is_in_onnx_export():
        return x + x.new_zeros((1, 1, h, w))
    if torch.jit.is_tracing():
        return _scripted_check()(x, h, w, SIZE_ERROR)
    if x.dim() != 4 or tuple(x.shape[-2:]) != (h, w):
        raise RuntimeError(SIZE_ERROR.format(h, w, list(x.shape)))
    return x


def size_guard(x: torch.Tensor) -> torch.Tensor:
    """``x``, with :func:`check_size` against its own size recorded in a traced or exported
    graph (the sizes become constants: the point here)."""
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', torch.jit.TracerWarning)
        h, w = int(x.shape[-2]), int(x.shape[-1])
    return check_size(x, h, w)


def is_fx_proxy(x) -> bool:
    """Whether ``x`` is a value of a graph being recorded by ``torch.fx.symbolic_trace``
    (the public test: FX hands modules :class:`torch.fx.Proxy` objects)."""
    return isinstance(x, torch.fx.Proxy)


def fx_leaf_call(module: torch.nn.Module, *args, **kwargs):
    """``module(*args, **kwargs)``; under FX one node (``torch.fx.wrap``)."""
    return module(*args, **kwargs)


torch.fx.wrap('fx_leaf_call')


def fx_leaf(forward):
    """Decorate a module's ``forward`` whose Python depends on the sizes of its input:
    under ``torch.fx.symbolic_trace`` the call becomes one node (:func:`fx_leaf_call`)
    that runs the module when the graph runs; otherwise ``forward`` runs as is (one
    ``isinstance`` more per call). Arguments that are :data:`NO_PADDING` (all of them
    under FX) are left out of the node, so ``forward`` must default them to it."""
    signature = inspect.signature(forward)

    @functools.wraps(forward)
    def wrapper(self, *args, **kwargs):
        if not (args and is_fx_proxy(args[0])):
            return forward(self, *args, **kwargs)
        bound = signature.bind(self, *args, **kwargs)
        for name, value in list(bound.arguments.items()):
            if value is NO_PADDING:
                if signature.parameters[name].default is not NO_PADDING:
                    raise TypeError(f'{type(self).__name__}.forward must default {name} to '
                                    'NO_PADDING to be an FX leaf')
                del bound.arguments[name]
        return fx_leaf_call(self, *bound.args[1:], **bound.kwargs)

    return wrapper


def refuse_script(module: torch.nn.Module):
    """What ``torch.jit.script`` gets from an InLine backbone (through
    ``__prepare_scriptable__``): a plain refusal with the alternatives."""
    raise RuntimeError(f'{type(module).__name__} cannot be compiled by torch.jit.script: its '
                       'windows, shifts and padding are decided in Python from the input size. '
                       'Use torch.jit.trace / inline_mm.deploy.backbone.trace_backbone (one graph '
                       'per input size), torch.onnx.export '
                       '(inline_mm.deploy.backbone.export_onnx), '
                       'torch.compile, or torch.fx.symbolic_trace')
