"""Padding awareness: which part of a zero-padded batch map belongs to each image.

mmdet and mmseg batch images of different sizes by zero-padding them at the bottom
and right, after normalisation, so padding is exactly 0 in every channel. A backbone
that mixes tokens over the whole map (InLine's means and ``K^T V``, the token mean
its local kernels come from, convolutions across the border of an image) would let
that padding change an image's features, so the same image would get different
predictions alone and next to a larger one.

:class:`ValidMap` carries each image's valid ``(h, w)`` on one map of the batch and
gives the blocks what they need to ignore the rest: a token mask, per-image token
counts, masked means, zeroing, per-image position tables and per-image tensors of
sizes for the layout decisions an image alone would take on its own size (window
clipping and shifts). The rule every family follows:

* statistics (means, covariances, token means) run over each image's valid tokens;
* attention keys outside an image are masked, and q/k/v there are zero, so a local
  convolution sees at an image's border exactly the zeros it would see alone;
* tokens outside an image are zeroed before anything reads across tokens (patch
  merging, overlapping convolutions) and when they leave the backbone.

A map holds its sizes as the path of the forward needs them (:func:`.impl.choose_path`;
docs/padding.md, "Two paths"): a ``(B, 2)`` tensor on the batch's device for the plain
form (the "batched" map: every method is a fixed-shape tensor operation over the whole
batch, no loop over the images, no device-to-host read), or Python pairs read once on
the host for the kernel, which loops over the images with their sizes known.

A map whose images all cover it is :data:`NO_PADDING`, whose methods are the plain
operations (no masks, no copies): the backbones call the same methods either way and
need no branches, and inputs without padding give exactly the outputs they gave
before padding awareness existed. Only host sizes can tell a batch is unpadded; a map
of device sizes masks whatever they are.
"""
from typing import Callable, Dict, Hashable, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F

from .precision import no_autocast

__all__ = ['ValidMap', 'NoPadding', 'NO_PADDING', 'detect_valid_sizes', 'build_valid_map',
           'zero_padding', 'zero_outside_']

Size = Tuple[int, int]
#: each image's ``(h, w)`` region at the top left of a padded batch's map
Regions = Tuple[Size, ...]


def zero_outside_(t: torch.Tensor, regions: Sequence[Size]) -> torch.Tensor:
    """Zero, in place, what lies outside each image of a ``(B, H, W, ...)`` tensor (any
    strides): image ``i`` is the top-left ``regions[i] = (h, w)``. Writes the padding
    only (no mask is read, the images' own values are not touched); not recorded by
    autograd. The kernel's zeroing."""
    for i, (h, w) in enumerate(regions):
        if h < t.shape[1]:
            t[i, h:].zero_()
        if w < t.shape[2]:
            t[i, :h, w:].zero_()
    return t


def detect_valid_sizes(x: torch.Tensor) -> torch.Tensor:
    """Each image's ``(h, w)`` before its trailing rows and columns that are exactly
    zero in every channel (the padding the stock data preprocessors write), as a
    ``(B, 2)`` long tensor on ``x``'s device (nothing is read back to the host).

    An image that is zero everywhere is taken as unpadded.

    Args:
        x (Tensor): ``(B, C, H, W)``.
    """
    _, _, h, w = x.shape
    # The largest |value| over the channels: 0 exactly where every channel is 0 (NaN,
    # content, stays NaN and is not 0).
    peak = x.detach().abs().amax(dim=1)                                # (B, H, W)
    rows, cols = peak.amax(dim=2) != 0, peak.amax(dim=1) != 0          # (B, H), (B, W)
    # First True counted from the end; argmax of an all-False row is 0 (= unpadded).
    vh = h - rows.flip(1).int().argmax(1)
    vw = w - cols.flip(1).int().argmax(1)
    return torch.stack([vh, vw], dim=1)


class ValidMap:
    """Each image's valid region on one ``(H, W)`` map of a padded batch.

    Args:
        hw (tuple[int, int]): The batch map size ``(H, W)``.
        sizes (Sequence[tuple[int, int]] | Tensor): Each image's valid ``(h, w)`` at the
            top left, ``1 <= h <= H``, ``1 <= w <= W``: Python pairs (the per-sample
            path) or a ``(B, 2)`` integer tensor (the batched path; not checked, not
            read back).
        device (torch.device, optional): Where masks and counts are made (default: the
            tensor's, else the CPU).
        prefix (int): Tokens before the map (InLine-DeiT's class token), always valid.
    """

    #: whether some image may leave part of the map (False only for :data:`NO_PADDING`)
    is_padded = True

    def __init__(self, hw: Size, sizes: Union[Sequence[Size], torch.Tensor],
                 device: Optional[torch.device] = None, prefix: int = 0):
        self.hw = (hw[0], hw[1])
        self.prefix = prefix
        self._cache: Dict[Hashable, torch.Tensor] = {}
        if isinstance(sizes, torch.Tensor):
            if sizes.dim() != 2 or sizes.shape[1] != 2:
                raise ValueError(f'sizes must be a (B, 2) tensor, got {tuple(sizes.shape)}')
            self.device = sizes.device if device is None else torch.device(device)
            self._size_tensor = sizes.to(self.device, torch.long)
            #: Python pairs on the per-sample path; None on the batched path
            self.sizes: Optional[List[Size]] = None
            return
        self.device = torch.device('cpu' if device is None else device)
        self.sizes = [(int(h), int(w)) for h, w in sizes]
        self._size_tensor = None
        for h, w in self.sizes:
            if not (1 <= h <= self.hw[0] and 1 <= w <= self.hw[1]):
                raise ValueError(f'valid size {(h, w)} does not fit a '
                                 f'{self.hw[0]}x{self.hw[1]} map')

    @classmethod
    def for_map(cls, hw: Size, sizes: Union[Sequence[Size], torch.Tensor],
                device: Optional[torch.device] = None, prefix: int = 0) -> 'ValidMap':
        """A :class:`ValidMap`, or :data:`NO_PADDING` when every image is known to cover
        the whole map (Python sizes; a tensor of sizes is never read to find out)."""
        if not isinstance(sizes, torch.Tensor) and all(
                (int(h), int(w)) == (int(hw[0]), int(hw[1])) for h, w in sizes):
            return NO_PADDING
        return cls(hw, sizes, device, prefix)

    def __repr__(self) -> str:
        sizes = 'tensor' if self.sizes is None else self.sizes
        return f'ValidMap(hw={self.hw}, sizes={sizes}, prefix={self.prefix})'

    def __len__(self) -> int:
        return len(self.sizes) if self.sizes is not None else self._size_tensor.shape[0]

    @property
    def size_tensor(self) -> torch.Tensor:
        """``(B, 2)`` long: each image's ``(h, w)`` on :attr:`device`."""
        if self._size_tensor is None:
            self._size_tensor = torch.tensor(self.sizes, dtype=torch.long).to(
                self.device, non_blocking=True)
        return self._size_tensor

    def host_sizes(self) -> List[Size]:
        """Each image's ``(h, w)`` as Python ints (on the batched path a device-to-host
        read: for tools, never for a forward)."""
        if self.sizes is not None:
            return list(self.sizes)
        return [tuple(s) for s in self.size_tensor.tolist()]

    def memo(self, key: Hashable, make: Callable[[], torch.Tensor]) -> torch.Tensor:
        """``make()``, made once per map for ``key`` (a layout's constants): the blocks of a
        stage share one map, so a mask they all need is made once per forward."""
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    # ------------------------------------------------------------------ other maps
    def scaled(self, hw: Size, stride: int, prefix: Optional[int] = None) -> 'ValidMap':
        """The valid regions on a map ``stride`` times smaller (a patch embedding, a
        merge): ``ceil(h / stride)``, as each image alone would be padded and reduced.
        :data:`NO_PADDING` once every image is known to cover the map."""
        prefix = self.prefix if prefix is None else prefix
        # ceil(h / stride), written here: layers.py imports this module.
        if self.sizes is None:
            sizes = torch.div(self._size_tensor + (stride - 1), stride, rounding_mode='floor')
            sizes = torch.stack([sizes[:, 0].clamp_max(hw[0]), sizes[:, 1].clamp_max(hw[1])], 1)
            return ValidMap(hw, sizes, self.device, prefix)
        sizes = [(min((h + stride - 1) // stride, hw[0]),
                  min((w + stride - 1) // stride, hw[1])) for h, w in self.sizes]
        return ValidMap.for_map(hw, sizes, self.device, prefix)

    def pooled(self, ratio: int) -> 'ValidMap':
        """The cells of a ``ratio``-strided unpadded reduction (PVT's spatial reduction)
        wholly inside each image: ``floor(h / ratio)`` (at least 1), as alone."""
        if ratio == 1:
            return self
        hw = (self.hw[0] // ratio, self.hw[1] // ratio)
        if self.sizes is None:
            cells = torch.div(self._size_tensor, ratio, rounding_mode='floor').clamp_min(1)
            return ValidMap(hw, cells, self.device)
        cells = [(max(h // ratio, 1), max(w // ratio, 1)) for h, w in self.sizes]
        return ValidMap.for_map(hw, cells, self.device)

    # ------------------------------------------------------------------ masks
    @property
    def pixels(self) -> torch.Tensor:
        """``(B, H, W)`` bool, True inside each image."""
        if 'pixels' not in self._cache:
            sizes = self.size_tensor
            rows = torch.arange(self.hw[0], device=self.device)[None, :] < sizes[:, :1]
            cols = torch.arange(self.hw[1], device=self.device)[None, :] < sizes[:, 1:]
            self._cache['pixels'] = rows[:, :, None] & cols[:, None, :]
        return self._cache['pixels']

    @property
    def mask(self) -> torch.Tensor:
        """``(B, prefix + H * W)`` bool, True for an image's own tokens."""
        if 'mask' not in self._cache:
            mask = self.pixels.flatten(1)
            if self.prefix:
                mask = torch.cat([mask.new_ones(mask.shape[0], self.prefix), mask], dim=1)
            self._cache['mask'] = mask
        return self._cache['mask']

    def key_mask(self) -> torch.Tensor:
        """``(B, 1, 1, N)`` bool attention mask: keys inside each image."""
        return self.mask.view(self.mask.shape[0], 1, 1, -1)

    @property
    def counts(self) -> torch.Tensor:
        """``(B,)`` float32: valid tokens per image (prefix included)."""
        if 'counts' not in self._cache:
            if self.sizes is None:
                counts = self._size_tensor.prod(dim=1).float() + self.prefix
            else:
                counts = torch.tensor([self.prefix + h * w for h, w in self.sizes],
                                      dtype=torch.float32).to(self.device, non_blocking=True)
            self._cache['counts'] = counts
        return self._cache['counts']

    # ------------------------------------------------------------------ token ops
    def zero(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, prefix + H*W, C)`` tokens with those outside each image set to 0
        (``where``, not a product: garbage there, even inf or NaN, cannot leak)."""
        return torch.where(self.mask[..., None], x, x.new_zeros(()))

    def zero_(self, x: torch.Tensor) -> torch.Tensor:
        """:meth:`zero` in place (``masked_fill_``), for a tensor the caller has just made
        (a norm's or a projection's output, nothing else holding it)."""
        return x.masked_fill_(~self.mask[..., None], 0)

    def zero_image_(self, x: torch.Tensor) -> torch.Tensor:
        """:meth:`zero_image` in place, for a ``(B, C, H, W)`` tensor the caller has just
        made: as :meth:`zero_`."""
        return x.masked_fill_(~self.pixels[:, None], 0)

    def zero_own(self, x: torch.Tensor) -> torch.Tensor:
        """The tokens outside each image zeroed, for a tensor the caller is done with
        (a stage output about to be merged): in place when autograd records nothing for
        it (inference), else a copy (:meth:`zero`; autograd may have saved ``x`` for a
        backward)."""
        if torch.is_grad_enabled() and x.requires_grad:
            return self.zero(x)
        return self.zero_(x)

    def zero_image(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, C, H, W)`` with everything outside each image set to 0."""
        return torch.where(self.pixels[:, None], x, x.new_zeros(()))

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, N, C)`` -> ``(B, C)``: each image's mean over its own tokens, as one
        product with per-token weights (``1 / count`` inside, 0 outside) in fp32, so a
        half-precision sum over a large map cannot overflow. Tokens outside must be
        finite (they are: the blocks compute them from finite values like any other)."""
        weights = self.memo('mean-weights',
                            lambda: (self.mask.float() / self.counts[:, None]).unsqueeze(1))
        xf = x if x.dtype == torch.float32 else x.float()
        # Autocast off: it would run the product (and cast both operands) in half precision.
        with no_autocast(x.device.type):
            return torch.bmm(weights, xf).squeeze(1).to(x.dtype)

    def table(self, table: torch.Tensor, hw: Size) -> torch.Tensor:
        """``(B, H * W, C)``: a ``(1, C, gh, gw)`` position table resized to each image's
        own region of the ``hw`` map (bilinear, ``align_corners=False``, as
        ``F.interpolate`` resizes it for the image alone), zero outside. With the sizes
        on the host (the per-sample path), ``F.interpolate`` itself, once per distinct
        size, written into each image's region; otherwise one ``grid_sample`` with a
        per-image grid: no loop over the images."""
        gh, gw = table.shape[-2:]
        if self.sizes is not None:
            out = table.new_empty((len(self), hw[0], hw[1], table.shape[1]))
            resized = {}
            for i, (h, w) in enumerate(self.sizes):
                if (h, w) not in resized:
                    resized[h, w] = (table if (h, w) == (gh, gw) else F.interpolate(
                        table, size=(h, w), mode='bilinear', align_corners=False))[0]
                out[i, :h, :w] = resized[h, w].permute(1, 2, 0)
            return zero_outside_(out, self.sizes).flatten(1, 2)
        # The batch size from the tensor, not len(): a graph being traced keeps it free.
        b = self.size_tensor.shape[0]
        # Coordinates in fp64 for an fp64 table (fp32 ones are off by ~1e-7 of a pixel).
        dt = torch.float64 if table.dtype == torch.float64 else torch.float32
        sizes = self.size_tensor.to(dt)
        h, w = hw
        # The source pixel of output pixel i of an image of side s: (i + 0.5) * g / s - 0.5
        # (F.interpolate's, clamped at 0 as it clamps; the far side is clamped by the
        # border mode). grid_sample's normalised coordinate of source pixel p: (2p + 1) / g - 1.

        def axis(n: int, side: torch.Tensor, g: int) -> torch.Tensor:
            i = torch.arange(n, device=table.device, dtype=dt)
            src = ((i[None, :] + 0.5) * (g / side[:, None]) - 0.5).clamp_min(0)
            return (2 * src + 1) / g - 1                                   # (B, n)
        ys, xs = axis(h, sizes[:, 0], gh), axis(w, sizes[:, 1], gw)
        grid = torch.stack([xs[:, None, :].expand(b, h, w), ys[:, :, None].expand(b, h, w)],
                           dim=-1)
        out = F.grid_sample(table.expand(b, -1, -1, -1), grid.to(table.dtype), mode='bilinear',
                            padding_mode='border', align_corners=False)     # (B, C, H, W)
        return self.zero_image(out).flatten(2).transpose(1, 2)


class NoPadding(ValidMap):
    """The map of a batch whose images all cover it: every method is the plain
    operation (no mask, no copy), so callers need no ``if padded`` branches."""

    is_padded = False
    mask = counts = None
    sizes = ()

    __init__ = object.__init__      # no sizes to hold

    def __repr__(self) -> str:
        return 'NO_PADDING'

    def key_mask(self) -> None:
        return None

    def _itself(self, *args, **kwargs) -> 'NoPadding':
        """At any scale, pooled or not, no padding is still no padding."""
        return self

    def _unchanged(self, x: torch.Tensor) -> torch.Tensor:
        """Nothing to zero: ``x`` as it is."""
        return x

    scaled = pooled = _itself
    zero = zero_ = zero_own = zero_image = zero_image_ = _unchanged

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        # A sum, then the division of the (B, C) result: the backward is then a broadcast
        # (Tensor.mean's divides a whole (B, N, C) gradient). Sums of fp16/bf16 accumulate
        # in fp32 (CPU and CUDA) and round once: bf16 (fp32's range) sums in its own dtype,
        # where dtype=float32 would first copy the whole input to fp32 (on the CPU); fp16,
        # whose sum over a large map may overflow, takes the mean, which divides first.
        if x.dtype == torch.bfloat16:
            return x.sum(dim=1).div_(x.shape[1])
        if x.dtype == torch.float16:
            return x.mean(dim=1)
        return x.sum(dim=1, dtype=torch.float32).div_(x.shape[1]).to(x.dtype)


#: what a map without padding is
NO_PADDING = NoPadding()


def build_valid_map(x: torch.Tensor, valid_sizes=None, *, path: str, pad_aware: bool = True,
                    min_size: int = 1, exporting: bool = False) -> ValidMap:
    """Each image's region of the padded batch ``x``, its sizes held as ``path`` needs them
    (``'plain'`` or ``'kernel'``, what :func:`.impl.choose_path` chose for this forward).

    ``valid_sizes`` (one ``(h, w)`` per image, in input pixels) is taken as given;
    otherwise, when ``pad_aware``, the regions are read from the input: trailing rows and
    columns exactly zero in every channel are padding (what mmdet's and mmseg's data
    preprocessors write after normalisation). A region is widened to ``min_size`` per side
    (the smallest input the backbone runs) where the image allows. On the plain path (and
    under ``torch.compile``) the sizes stay a tensor on the device; on the kernel path they
    are read to the host once, and a batch every image of which fills the map is
    :data:`NO_PADDING`. While a graph with its sizes as constants is recorded
    (``exporting``: tracing, ONNX export) nothing is read from the input (that reading is
    data-dependent): the graph is padding-unaware unless ``valid_sizes`` is given as a
    ``(B, 2)`` tensor, an input of the graph, which takes the plain path.
    """
    b, _, h, w = x.shape
    batched = path == 'plain'
    floor_h, floor_w = min(min_size, h), min(min_size, w)
    if valid_sizes is not None:
        if exporting and not isinstance(valid_sizes, torch.Tensor):
            raise ValueError('valid_sizes in a graph being traced or exported must be a '
                             '(B, 2) tensor (an input of the graph): Python sizes would be '
                             'recorded as constants of the graph')
        if isinstance(valid_sizes, torch.Tensor) and batched:      # (exporting: plain)
            if valid_sizes.shape != (b, 2):
                raise ValueError(f'valid_sizes must give one (h, w) per image of the batch '
                                 f'({b}): a ({b}, 2) tensor, got {tuple(valid_sizes.shape)}')
            sizes = valid_sizes.to(x.device, torch.long)
            sizes = torch.stack([sizes[:, 0].clamp(floor_h, h),
                                 sizes[:, 1].clamp(floor_w, w)], 1)
            return ValidMap((h, w), sizes, x.device)
        sizes = [tuple(int(v) for v in s) for s in valid_sizes]
        if len(sizes) != b or any(len(s) != 2 for s in sizes):
            raise ValueError(f'valid_sizes must give one (h, w) per image of the batch '
                             f'({b}), got {valid_sizes!r}')
        bad = [s for s in sizes if not (1 <= s[0] <= h and 1 <= s[1] <= w)]
        if bad:
            raise ValueError(f'valid_sizes {bad} do not fit the {h}x{w} input: each (h, w) '
                             f'must be within 1..{h} x 1..{w}')
    elif not pad_aware or exporting:
        return NO_PADDING
    elif batched:
        sizes = detect_valid_sizes(x)
        sizes = torch.stack([sizes[:, 0].clamp_min(floor_h), sizes[:, 1].clamp_min(floor_w)], 1)
        return ValidMap((h, w), sizes, x.device)
    else:
        sizes = detect_valid_sizes(x).tolist()       # the kernel path's one host read
    sizes = [(max(vh, floor_h), max(vw, floor_w)) for vh, vw in sizes]
    if batched:
        return ValidMap((h, w), torch.tensor(sizes, device=x.device), x.device)
    return ValidMap.for_map((h, w), sizes, x.device)


def zero_padding(x: torch.Tensor, valid: ValidMap, sizes_given: bool) -> torch.Tensor:
    """The ``(B, C, H, W)`` input ``x`` zero outside each image of ``valid``. Given sizes
    (``sizes_given``) make the rest padding whatever it holds; read from the input it is
    zero already, and is zeroed again only where autograd records ``x`` (the ``where``
    keeps gradients off it)."""
    if not valid.is_padded:
        return x
    if not sizes_given and not (torch.is_grad_enabled() and x.requires_grad):
        return x
    return valid.zero_image(x)
