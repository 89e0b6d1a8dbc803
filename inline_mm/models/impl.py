"""Which form of InLine attention runs (docs/padding.md, "Two paths"): the ``impl`` setting,
read at build (:func:`check_impl`), and :func:`choose_path`, the one function that turns
it into a path at a forward. A backbone asks it once per forward (its padding map holds the
sizes as that path needs them) and each InLine attention for its call: the same answer, as
a backbone sets its ``impl`` on every attention it holds.
"""
import os
from typing import Optional, Union

import torch
import torch.fx

from .checkpoint import print_log

__all__ = ['IMPLS', 'IMPL_ENV', 'check_impl', 'is_exporting', 'is_capturing', 'choose_path']

#: what the ``impl`` option of the attention and the backbones takes
IMPLS = ('auto', 'plain', 'kernel')
#: the environment variable that sets ``impl`` for every model built in the process
IMPL_ENV = 'INLINE_MM_IMPL'

#: the (owner, impl, device type, path) choices logged so far (each once per process)
_LOGGED = set()


def check_impl(impl: Optional[str] = None, batched: Optional[bool] = None) -> str:
    """``impl`` checked: ``'auto'``, ``'plain'`` or ``'kernel'``; None takes
    ``$INLINE_MM_IMPL``, else ``'auto'``. ``batched``, the option's older name, maps onto
    it (True: ``'plain'``, False: ``'kernel'``, None: nothing)."""
    if batched is not None:
        if batched not in (True, False):
            raise ValueError(f"batched must be None, True (impl='plain') or False "
                             f"(impl='kernel'), got {batched!r}")
        alias = 'plain' if batched else 'kernel'
        if impl is not None and impl != alias:
            raise ValueError(f'batched={batched} is impl={alias!r}, but impl={impl!r} was '
                             'given too: give one of them')
        impl = alias
    where = 'impl'
    if impl is None:
        impl, where = os.environ.get(IMPL_ENV) or 'auto', IMPL_ENV
    if impl not in IMPLS:
        raise ValueError(f'{where}={impl!r}; allowed: {", ".join(map(repr, IMPLS))} (auto: the '
                         'kernel on the CPU, the plain form elsewhere)')
    return impl


def is_exporting() -> bool:
    """Whether a graph with its sizes as constants is being recorded: ``torch.jit.trace``
    or the TorchScript ONNX exporter."""
    return torch.jit.is_tracing() or torch.onnx.is_in_onnx_export()


def is_capturing(x=None) -> bool:
    """Whether a program is being captured, not run: ``torch.compile`` / ``torch.export``,
    :func:`is_exporting`, ``torch.jit.script``, or ``x`` an FX proxy (none can record the
    kernel, and a loop over the batch would bake its size in)."""
    return (torch.compiler.is_compiling() or is_exporting() or torch.jit.is_scripting()
            or isinstance(x, torch.fx.Proxy))


def choose_path(impl: str, x: Union[torch.Tensor, torch.device, str],
                owner: Optional[str] = None) -> str:
    """``'plain'`` or ``'kernel'``: what ``impl`` runs on the input ``x`` (or a device).
    ``'plain'`` while a program is captured (:func:`is_capturing`); else ``'auto'`` is the
    kernel on the CPU, where it is faster, and the plain form elsewhere (no loop over the
    batch, no host read). ``owner`` (a backbone's name): log each first choice."""
    if is_capturing(x):
        return 'plain'
    device = (x.device if isinstance(x, torch.Tensor) else torch.device(x)).type
    path = impl if impl != 'auto' else 'kernel' if device == 'cpu' else 'plain'
    if owner is not None and (owner, impl, device, path) not in _LOGGED:
        _LOGGED.add((owner, impl, device, path))
        what = 'the per-sample kernel' if path == 'kernel' else 'the plain form'
        print_log(f'{owner}: InLine attention runs {what} on {device} (impl={impl!r}; set '
                  "impl= or INLINE_MM_IMPL to 'auto', 'plain' or 'kernel')", logger='current')
    return path

