"""The dtypes the models choose under autocast: the dtype autocast runs products in
(:func:`autocast_dtype`: the InLine kernel runs in it) and a region without autocast
(:func:`no_autocast`: statistics kept in fp32, a kernel run in one dtype)."""
import contextlib
from typing import Optional

import torch

__all__ = ['autocast_dtype', 'no_autocast']


def autocast_dtype(device: str) -> Optional[torch.dtype]:
    """The dtype autocast runs products in on ``device`` (a device type), None where it is
    off: the low dtype the kernel runs in under autocast."""
    if not torch.amp.is_autocast_available(device) or not torch.is_autocast_enabled(device):
        return None
    return torch.get_autocast_dtype(device)


def no_autocast(device: str):
    """A context with autocast off on ``device`` (a device type), for code that chooses
    its own dtypes (fp32 statistics, a kernel run in one dtype)."""
    return (torch.autocast(device, enabled=False) if torch.amp.is_autocast_available(device)
            else contextlib.nullcontext())
