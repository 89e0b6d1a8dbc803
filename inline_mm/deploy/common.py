"""What the deployable detectors and segmentors share: the data preprocessor in the graph,
each image's region, and the convolutions of necks and heads that see only it.

**Each image as alone.** A graph is made for one canvas size ``(H, W)`` and takes, with the
batch, each image's valid size ``(h, w)`` at the top left of the canvas. Alone, mmdet and
mmseg pad an image to their preprocessor's divisor (mmdet: ``pad_size_divisor``; mmseg at
test: its ``test_cfg``, usually nothing) and run the model on that map, the image's
*region*. The graph computes what that run computes:

* the backbone gets the valid sizes (padding-aware: each image's statistics over its own
  tokens; ``InLineBackbone.forward(x, valid_sizes)``);
* every convolution wider than 1x1 of the neck and the dense heads sees zeros outside the
  image's region at its map (``ceil(region / stride)`` cells), as its own zero padding
  would be there: :class:`RegionConvs`;
* resizes, pooling, anchors and RoIAlign work on the region (the modules of each task).

**Or every image fills the canvas** (``canvas='filled'``, chosen when the graph is built and
recorded in the file): then each image's region is the whole canvas and the graph computes
what mmdet and mmseg compute on such a batch, without any of the masks above (the backbone
padding-unaware, the convolutions, anchors and resizes as the model's own). It is the faster
graph where every image of a deployment has the canvas's size; it gives wrong results for
smaller images, which :class:`~.runtime.OnnxModel` refuses for it.
"""
import math
from typing import Iterable, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from torch import Tensor

from .ops import cells_at

__all__ = ['NotExportable', 'Preprocess', 'RegionConvs', 'stride_of', 'check_type',
           'region_of', 'CANVASES', 'check_canvas']

#: what a graph is made for: ``'padded'``, each image of a batch at the top left of the
#: canvas, any size up to it (each computed as alone); ``'filled'``, every image of the
#: canvas's size (no padding masks in the graph)
CANVASES = ('padded', 'filled')


class NotExportable(ValueError):
    """A model (or a part of it) this package cannot export with its post-processing."""


def check_canvas(canvas: str) -> str:
    """``canvas`` if it is one of :data:`CANVASES`, else a clear error."""
    if canvas not in CANVASES:
        raise ValueError(f"canvas={canvas!r}: choose 'padded' (images of any size up to the "
                         "graph's, each computed as alone) or 'filled' (every image of the "
                         "graph's size: no padding masks, faster)")
    return canvas


def check_type(module, allowed: Sequence[type], where: str, advice: str):
    """Refuse ``module`` unless its class is one of ``allowed`` exactly (a subclass may
    change what its post-processing computes)."""
    if type(module) not in tuple(allowed):
        names = ', '.join(c.__name__ for c in allowed)
        raise NotExportable(f'{where} is {type(module).__name__}: its post-processing is not '
                            f'exportable here (supported: {names}). {advice}')


class Preprocess(nn.Module):
    """The data preprocessor of mmdet / mmseg at test time, in the graph: ``(B, 3, H, W)``
    images (pixel values, the channel order the test pipeline loads them in) -> channel
    conversion, ``(x - mean) / std``, and ``pad_value`` outside each image's ``(h, w)``
    (nothing outside for ``sizes=None``: images that fill the canvas)."""

    def __init__(self, data_preprocessor: nn.Module):
        super().__init__()
        dp = data_preprocessor
        self.swap = bool(getattr(dp, '_channel_conversion', False)
                         or getattr(dp, 'channel_conversion', False))
        self.normalize = bool(getattr(dp, '_enable_normalize', False))
        if self.normalize:
            self.register_buffer('mean', dp.mean.detach().clone().float().view(1, -1, 1, 1),
                                 persistent=False)
            self.register_buffer('std', dp.std.detach().clone().float().view(1, -1, 1, 1),
                                 persistent=False)
        self.pad_value = float(getattr(dp, 'pad_value', getattr(dp, 'pad_val', 0)))

    def forward(self, images: Tensor, sizes: Optional[Tensor]) -> Tensor:
        x = images.float()
        if self.swap:
            x = x[:, [2, 1, 0]]
        if self.normalize:
            x = (x - self.mean) / self.std
        if sizes is None:
            return x
        h, w = x.shape[-2:]
        rows = torch.arange(h, device=x.device)[None, :] < sizes[:, :1]
        cols = torch.arange(w, device=x.device)[None, :] < sizes[:, 1:]
        inside = (rows[:, :, None] & cols[:, None, :])[:, None]
        return torch.where(inside, x, x.new_full((), self.pad_value))


def region_of(sizes: Tensor, divisor: int, fixed: Optional[Tuple[int, int]],
              hw: Tuple[int, int]) -> Tensor:
    """Each image's region: its size padded up to ``divisor`` (or to ``fixed``), at most the
    canvas ``hw``."""
    if fixed is not None:
        region = sizes.new_tensor(fixed)[None].expand_as(sizes)
    elif divisor > 1:
        region = cells_at(sizes, divisor) * divisor
    else:
        region = sizes
    return torch.minimum(region, sizes.new_tensor(hw)[None])


def stride_of(map_hw: Tuple[int, int], hw: Tuple[int, int]) -> int:
    """The stride ``s`` (a power of two) with ``ceil(hw / s) == map_hw``: a map's level on
    a canvas of size ``hw`` (every map of the backbones, necks and heads is one)."""
    for k in range(8):
        s = 2 ** k
        if math.ceil(hw[0] / s) == map_hw[0] and math.ceil(hw[1] / s) == map_hw[1]:
            return s
    raise NotExportable(f'a {map_hw[0]}x{map_hw[1]} map is no power-of-two level of the '
                        f'{hw[0]}x{hw[1]} input: a neck or head that resizes its maps by other '
                        'factors is not supported by the export')


class RegionConvs:
    """Forward pre-hooks, while the context is entered, on every convolution wider than
    1x1 of ``modules``: the input outside each image's region (at the input's level) is
    set to zero. ``region`` is ``(B, 2)`` in input pixels of the ``hw`` canvas."""

    def __init__(self, modules: Iterable[nn.Module], region: Tensor, hw: Tuple[int, int]):
        self.convs = [m for module in modules for m in module.modules()
                      if isinstance(m, nn.Conv2d) and max(m.kernel_size) > 1]
        self.region, self.hw = region, hw
        self.handles = []

    def _hook(self, module, args):
        from .ops import zero_outside
        x = args[0]
        stride = stride_of(tuple(x.shape[-2:]), self.hw)
        return (zero_outside(x, cells_at(self.region, stride)),) + tuple(args[1:])

    def __enter__(self):
        self.handles = [m.register_forward_pre_hook(self._hook) for m in self.convs]
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()
        self.handles = []
