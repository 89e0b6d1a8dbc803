"""Padding awareness: which part of a zero-padded batch map belongs to each image.

mmdet and mmseg batch images of different sizes by zero-padding them at the bottom
and right, after normalisation, so padding is exactly 0 in every channel. A backbone
that mixes tokens over the whole map (InLine's means and ``K^T V``, the token mean
its local kernels come from, convolutions across the border of an image) would let
that padding change an image's features, so the same image would get different
predictions alone and next to a larger one.

:class:`ValidMap` carries each image's valid ``(h, w)`` on one map of the batch and
gives the blocks what they need to ignore the rest: a token mask, per-image token
counts, masked means, zeroing, and grouping of images by a layout decision that
depends on the map size (window clipping, shifts, stripe widths) so that each image
gets the layout it would get alone. The rule every family follows:

* statistics (means, covariances, token means) run over each image's valid tokens;
* attention keys outside an image are masked, and q/k/v there are zero, so a local
  convolution sees at an image's border exactly the zeros it would see alone;
* tokens outside an image are zeroed before anything reads across tokens (patch
  merging, overlapping convolutions) and when they leave the backbone.

A map whose images all cover it is :data:`NO_PADDING`, whose methods are the plain
operations (no masks, no copies): the backbones call the same methods either way and
need no branches, and inputs without padding give exactly the outputs they gave
before padding awareness existed.
"""
from typing import Callable, Dict, Hashable, List, Optional, Sequence, Tuple

import torch

__all__ = ['ValidMap', 'NoPadding', 'NO_PADDING', 'detect_valid_sizes', 'zero_outside_']

Size = Tuple[int, int]
#: each image's ``(h, w)`` region at the top left of a padded batch's map
Regions = Tuple[Size, ...]


def zero_outside_(t: torch.Tensor, regions: Sequence[Size]) -> torch.Tensor:
    """Zero, in place, what lies outside each image of a ``(B, H, W, ...)`` tensor (any
    strides): image ``i`` is the top-left ``regions[i] = (h, w)``. Writes the padding
    only (no mask is read, the images' own values are not touched); not recorded by
    autograd (see :meth:`ValidMap.zero_`)."""
    for i, (h, w) in enumerate(regions):
        if h < t.shape[1]:
            t[i, h:].zero_()
        if w < t.shape[2]:
            t[i, :h, w:].zero_()
    return t


class _ZeroOutside(torch.autograd.Function):
    """:meth:`ValidMap.zero_` and :meth:`ValidMap.zero_image_` as one autograd node:
    ``zero_(t)`` (an unrecorded in-place zeroing of the padding's own memory) on the
    input, and on a copy of the gradient in the backward."""

    @staticmethod
    def forward(ctx, x, zero_):
        ctx.mark_dirty(x)
        ctx.zero_ = zero_
        return zero_(x)

    @staticmethod
    def backward(ctx, grad):
        # A copy: the gradient may be shared with another branch of the graph.
        return ctx.zero_(grad.clone()), None


def detect_valid_sizes(x: torch.Tensor) -> List[Size]:
    """Each image's ``(h, w)`` before its trailing rows and columns that are exactly
    zero in every channel (the padding the stock data preprocessors write).

    An image whose last row and last column both hold a non-zero value is taken as
    unpadded without looking further; an image that is zero everywhere is taken as
    unpadded too. One device-to-host copy.

    Args:
        x (Tensor): ``(B, C, H, W)``.
    """
    b, _, h, w = x.shape
    # Cheap first look: only images ending in a zero row or column can be padded.
    last_row_zero = x[:, :, -1, :].eq(0).flatten(1).all(1)
    last_col_zero = x[:, :, :, -1].eq(0).flatten(1).all(1)
    maybe = (last_row_zero | last_col_zero).tolist()
    sizes = [(h, w)] * b
    if not any(maybe):
        return sizes
    idx = [i for i, m in enumerate(maybe) if m]
    # The largest |value| over the channels: 0 exactly where every channel is 0 (NaN,
    # content, stays NaN and is not 0). One pass over each image and two over the map:
    # a bool image and its any() cost ~3x as much on CPU.
    peak = torch.stack([x[i].abs().amax(dim=0) for i in idx])          # (b', H, W)
    rows, cols = peak.amax(dim=2) != 0, peak.amax(dim=1) != 0          # (b', H), (b', W)
    # First True counted from the end; argmax of an all-False row is 0 (= unpadded).
    vh = (h - rows.flip(1).int().argmax(1)).tolist()
    vw = (w - cols.flip(1).int().argmax(1)).tolist()
    for j, i in enumerate(idx):
        sizes[i] = (vh[j], vw[j])
    return sizes


class ValidMap:
    """Each image's valid region on one ``(H, W)`` map of a padded batch.

    Args:
        hw (tuple[int, int]): The batch map size ``(H, W)``.
        sizes (Sequence[tuple[int, int]]): Each image's valid ``(h, w)`` at the top
            left, ``1 <= h <= H``, ``1 <= w <= W``.
        device (torch.device): Where masks and counts are made.
        prefix (int): Tokens before the map (InLine-DeiT's class token), always valid.
    """

    #: whether any image leaves part of the map (False only for :data:`NO_PADDING`)
    is_padded = True

    def __init__(self, hw: Size, sizes: Sequence[Size], device: torch.device, prefix: int = 0):
        self.hw = (int(hw[0]), int(hw[1]))
        self.sizes = [(int(h), int(w)) for h, w in sizes]
        self.device = torch.device(device)
        self.prefix = prefix
        for h, w in self.sizes:
            if not (1 <= h <= self.hw[0] and 1 <= w <= self.hw[1]):
                raise ValueError(f'valid size {(h, w)} does not fit a '
                                 f'{self.hw[0]}x{self.hw[1]} map')
        self._mask = self._pixels = self._counts = self._weights = None

    @classmethod
    def for_map(cls, hw: Size, sizes: Sequence[Size], device: torch.device,
                prefix: int = 0) -> 'ValidMap':
        """A :class:`ValidMap`, or :data:`NO_PADDING` when every image covers the whole
        map."""
        hw = (int(hw[0]), int(hw[1]))
        if all(tuple(s) == hw for s in sizes):
            return NO_PADDING
        return cls(hw, sizes, device, prefix)

    def __repr__(self) -> str:
        return f'ValidMap(hw={self.hw}, sizes={self.sizes}, prefix={self.prefix})'

    def __len__(self) -> int:
        return len(self.sizes)

    # ------------------------------------------------------------------ other maps
    def scaled(self, hw: Size, stride: int, prefix: Optional[int] = None) -> 'ValidMap':
        """The valid regions on a map ``stride`` times smaller (a patch embedding, a
        merge): ``ceil(h / stride)``, as each image alone would be padded and reduced.
        :data:`NO_PADDING` once every image covers the map."""
        # ceil(h / stride), written here: layers.py imports this module.
        sizes = [(min((h + stride - 1) // stride, hw[0]),
                  min((w + stride - 1) // stride, hw[1])) for h, w in self.sizes]
        return ValidMap.for_map(hw, sizes, self.device, self.prefix if prefix is None else prefix)

    def pooled(self, ratio: int) -> 'ValidMap':
        """The cells of a ``ratio``-strided unpadded reduction (PVT's spatial reduction)
        wholly inside each image: ``floor(h / ratio)`` (at least 1), as alone."""
        if ratio == 1:
            return self
        cells = [(max(h // ratio, 1), max(w // ratio, 1)) for h, w in self.sizes]
        return ValidMap.for_map((self.hw[0] // ratio, self.hw[1] // ratio), cells, self.device)

    # ------------------------------------------------------------------ masks
    @property
    def pixels(self) -> torch.Tensor:
        """``(B, H, W)`` bool, True inside each image."""
        if self._pixels is None:
            sizes = torch.tensor(self.sizes, dtype=torch.long).to(self.device, non_blocking=True)
            rows = torch.arange(self.hw[0], device=self.device)[None, :] < sizes[:, :1]
            cols = torch.arange(self.hw[1], device=self.device)[None, :] < sizes[:, 1:]
            self._pixels = rows[:, :, None] & cols[:, None, :]
        return self._pixels

    @property
    def mask(self) -> torch.Tensor:
        """``(B, prefix + H * W)`` bool, True for an image's own tokens."""
        if self._mask is None:
            mask = self.pixels.flatten(1)
            if self.prefix:
                mask = torch.cat([mask.new_ones(len(self), self.prefix), mask], dim=1)
            self._mask = mask
        return self._mask

    def key_mask(self) -> torch.Tensor:
        """``(B, 1, 1, N)`` bool attention mask: keys inside each image."""
        return self.mask.view(len(self), 1, 1, -1)

    @property
    def counts(self) -> torch.Tensor:
        """``(B,)`` float32: valid tokens per image (prefix included)."""
        if self._counts is None:
            counts = [self.prefix + h * w for h, w in self.sizes]
            counts = torch.tensor(counts, dtype=torch.float32)
            self._counts = counts.to(self.device, non_blocking=True)
        return self._counts

    # ------------------------------------------------------------------ token ops
    def zero(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, prefix + H*W, C)`` tokens with those outside each image set to 0
        (``where``, not a product: garbage there, even inf or NaN, cannot leak)."""
        return torch.where(self.mask[..., None], x, x.new_zeros(()))

    def zero_(self, x: torch.Tensor) -> torch.Tensor:
        """:meth:`zero` in place, for a tensor the caller has just made (a norm's or a
        projection's output, not a view, nothing else holding it). The forward writes
        the padding's tokens only; when ``x`` needs a gradient, autograd records one
        node whose backward zeroes it outside the images (one pass over the gradient).
        Under ``torch.compile`` and on views: ``masked_fill_`` with the token mask."""
        return self._in_place(x, self._zero_tokens_, lambda: self.mask[..., None])

    def zero_image_(self, x: torch.Tensor) -> torch.Tensor:
        """:meth:`zero_image` in place, for a ``(B, C, H, W)`` tensor the caller has just
        made (not a view): as :meth:`zero_`."""
        return self._in_place(x, self._zero_pixels_, lambda: self.pixels[:, None])

    @staticmethod
    def _in_place(x: torch.Tensor, zero_: Callable[[torch.Tensor], torch.Tensor],
                  inside: Callable[[], torch.Tensor]) -> torch.Tensor:
        """``zero_(x)``, as one autograd node when ``x`` needs a gradient; ``masked_fill_``
        outside ``inside()`` (a bool mask broadcasting to ``x``) where that cannot run."""
        if torch.compiler.is_compiling() or x._base is not None:
            return x.masked_fill_(~inside(), 0)
        if torch.is_grad_enabled() and x.requires_grad:
            return _ZeroOutside.apply(x, zero_)
        return zero_(x)

    def zero_own(self, x: torch.Tensor) -> torch.Tensor:
        """The tokens outside each image zeroed, for a tensor the caller is done with
        (a stage output about to be merged): in place when autograd records nothing for
        it (inference: the padding's tokens only), else a copy (:meth:`zero`; autograd
        may have saved ``x`` for a backward)."""
        if torch.is_grad_enabled() and x.requires_grad:
            return self.zero(x)
        return self.zero_(x)

    def _zero_tokens_(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, prefix + H*W, C)`` zeroed outside each image in place, unrecorded."""
        zero_outside_(x[:, self.prefix:].unflatten(1, self.hw), self.sizes)
        return x

    def _zero_pixels_(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, C, H, W)`` zeroed outside each image in place, unrecorded."""
        zero_outside_(x.permute(0, 2, 3, 1), self.sizes)
        return x

    def zero_image(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, C, H, W)`` with everything outside each image set to 0."""
        return torch.where(self.pixels[:, None], x, x.new_zeros(()))

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, N, C)`` -> ``(B, C)``: each image's mean over its own tokens, as one
        product with per-token weights (``1 / count`` inside, 0 outside) in fp32, so a
        half-precision sum over a large map cannot overflow. Tokens outside must be
        finite (they are: the blocks compute them from finite values like any other)."""
        if self._weights is None:
            self._weights = (self.mask.float() / self.counts[:, None]).unsqueeze(1)
        xf = x if x.dtype == torch.float32 else x.float()
        return torch.bmm(self._weights, xf).squeeze(1).to(x.dtype)

    def paste(self, make: Callable[[Size], torch.Tensor], hw: Size) -> torch.Tensor:
        """``(B, H * W, C)``: each image's ``make(its size)`` (a ``(1, h * w, C)`` table,
        made once per distinct size) in its region of the ``hw`` map, zero outside
        (per-image position tables)."""
        out = None
        for (h, w), idx in self.group(lambda size: size).items():
            part = make((h, w))
            if out is None:
                out = part.new_empty((len(self), self.hw[0], self.hw[1], part.shape[-1]))
            out[idx, :h, :w] = part.view(1, h, w, -1)
        # Every region written, then the rest zeroed: each element written once.
        with torch.no_grad():
            zero_outside_(out, self.sizes)
        return out.flatten(1, 2)

    # ------------------------------------------------------------------ layouts
    def group(self, layout: Callable[[Size], Hashable]) -> Dict[Hashable, List[int]]:
        """Images grouped by ``layout(valid_size)`` (insertion order), for decisions an
        image alone would take on its own size."""
        groups: Dict[Hashable, List[int]] = {}
        for i, size in enumerate(self.sizes):
            groups.setdefault(layout(size), []).append(i)
        return groups

    def run_grouped(self, fn: Callable, x: torch.Tensor,
                    layout: Callable[[Size], Hashable]) -> torch.Tensor:
        """``fn(x_group, layout_key, keys_group)`` on ``(B, H, W, ...)`` ``x`` for each
        group of images sharing a layout (``keys_group``: their :attr:`pixels`),
        reassembled in batch order (no copies when there is one group)."""
        groups = self.group(layout)
        if len(groups) == 1:
            (key, idx), = groups.items()
            return fn(x, key, self.pixels)
        out = None
        for key, idx in groups.items():
            index = torch.tensor(idx, device=x.device)
            part = fn(x.index_select(0, index), key, self.pixels[idx])
            if out is None:
                out = part.new_empty((x.shape[0],) + part.shape[1:])
            out = out.index_copy(0, index, part)
        return out


class NoPadding(ValidMap):
    """The map of a batch whose images all cover it: every method is the plain
    operation (no mask, no copy), so callers need no ``if padded`` branches."""

    is_padded = False
    mask = counts = None
    sizes = ()

    def __init__(self):
        pass

    def __repr__(self) -> str:
        return 'NO_PADDING'

    def scaled(self, hw: Size, stride: int, prefix: Optional[int] = None) -> ValidMap:
        return self

    def pooled(self, ratio: int) -> ValidMap:
        return self

    def key_mask(self) -> None:
        return None

    def zero(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def zero_(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def zero_own(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def zero_image(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def zero_image_(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=1)

    def paste(self, make: Callable[[Size], torch.Tensor], hw: Size) -> torch.Tensor:
        return make(tuple(hw))

    def run_grouped(self, fn: Callable, x: torch.Tensor,
                    layout: Callable[[Size], Hashable]) -> torch.Tensor:
        return fn(x, layout(tuple(x.shape[1:3])), None)


#: the one :class:`NoPadding`: what a map without padding is
NO_PADDING = NoPadding()
