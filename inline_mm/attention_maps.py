"""Exact attention maps of an InLine block: which keys each query's output is made of.

Readers of the InLine paper (Han et al., "Bridging the Divide: Reconsidering Softmax and
Linear Attention", NeurIPS 2024, arXiv 2412.06590; LeapLabTHU/InLine issues #2 and #4) ask
for the maps of its Fig. 1: normalised linear attention gives queries that point the same
way the same distribution over the keys (it is not injective), InLine's distributions are
distinct. This module reads one InLine attention call of a built backbone and computes,
per head, over one image's valid tokens, the weights ``A`` (queries x keys) of:

InLine (what the released blocks compute, their global term)::

    A_ij = (s / n) phi(q_i) . (phi(k_j) - mean_j' phi(k_j')) + 1 / n

  ``s = d ** -0.5``, ``n`` the image's tokens, ``phi`` the block's kernel (identity in the
  released models). Rows sum to 1 exactly; weights may be negative. ``A @ V`` is the
  block's global term ``s q_i Cov(K, V) + mean(V)`` (:mod:`.models.inline_function`).

normalised linear attention (the paper's baseline)::

    A_ij = phi(q_i) . phi(k_j) / sum_j' phi(q_i) . phi(k_j')

  with the block's kernel where it has one (``kernel`` other than ``'identity'``, or a
  block built with ``attention='linear'``, whose own weights these are); with the identity
  kernel of the released models the baseline needs a non-negative kernel, so ReLU is used
  and every figure says so. The normaliser ``phi(q_i) . mean_j phi(k_j)`` is floored at
  ``|.| >= 1e-6`` keeping its sign, as the blocks' ``attention='linear'`` does: rows sum to
  1 except where the floor applies (:attr:`AttentionMaps.floored` counts them); a query
  whose products are all 0 (ReLU) gets an all-zero row there: it has no distribution.
  ``phi(2q) = 2 phi(q)`` for ReLU, so ``q`` and ``2q`` get the same row: the
  non-injectivity the paper is about.

Softmax (what the same projections would give in a Softmax block)::

    A_ij = softmax_j(s q_i . k_j)

  on the raw projections ``q``, ``k`` (Softmax's ``exp`` is its own kernel).

The local term: the block's 3x3 depthwise kernel predicted from the token mean
(``attn.predict_kernels``), plus InLine-CSwin's LePE kernel where the block has one (the
two are one convolution, as :mod:`.models.attention` applies them); per head the mean over
the head's channels, or the mean over all channels. It is the same for every query of an
image; taps that fall outside the image read zero padding and are shown blank.

Padding: the weights of image ``b`` of a padded batch run over its own tokens only (the
``ValidMap`` of the call), so they equal those of the image alone.

InLine-DeiT's class token (``num_prefix_tokens``) is a query and a key like any other
token: it is counted in ``n``, in the means and in every row. Maps over the patch grid
show the patch keys only; the weight each query gives the class token is reported beside
them (:attr:`AttentionMaps.prefix`), so a row's grid plus its prefix weights sum to 1.

Everything is computed in float64 from the block's own float32 projections, for the chosen
query rows only (``m x n`` per head, not ``n x n``).
"""
import math
import os
import re
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from .models.attention import InLineAttention, record_calls
from .models.inline_function import LINEAR_EPS, guard_denominator
from .models.padding import ValidMap

__all__ = ['AttentionSite', 'AttentionSiteError', 'Capture', 'ImageTokens', 'AttentionMaps',
           'attention_sites', 'find_attention', 'capture_attention', 'inline_weights',
           'linear_weights', 'guard_denominator', 'softmax_weights', 'block_weights',
           'local_kernels', 'head_kernel', 'attention_maps', 'map_stride', 'METHODS',
           'LINEAR_EPS', 'Preprocess', 'to_rgb', 'load_image', 'prepare_image', 'grid_points',
           'point_to_cell', 'build_backbone']

#: the weight functions of a map, in the order of the figure's columns
METHODS = ('inline', 'linear', 'softmax')

_BLOCK = re.compile(r'(?:^|\.)(?:(?P<stage>\d+)\.)?blocks\.(?P<block>\d+)$')
_BRANCH = re.compile(r'(?:^|\.)attns?(?:\.(?P<branch>\d+))?$')


class AttentionSiteError(ValueError):
    """The chosen stage / block / branch is not an InLine attention of the backbone."""


@dataclass(frozen=True)
class AttentionSite:
    """One block of a backbone: where it is and what attention it has.

    Attributes:
        stage (int): Stage index (0 for a plain ViT: InLine-DeiT's blocks are stage 0).
        block (int): Block index within the stage.
        path (str): The block's module path.
        inline (tuple[str]): Module paths of its InLine attentions, one per branch (InLine-
            CSwin's blocks hold them in ``attns``); empty for a Softmax block.
    """

    stage: int
    block: int
    path: str
    inline: Tuple[str, ...]


def attention_sites(backbone: nn.Module) -> List[AttentionSite]:
    """Every block of ``backbone`` in module order, found from the module paths
    (``layers.<i>.blocks.<j>``, ``stages.<i>.blocks.<j>``, ``blocks.<j>``) with the InLine
    attentions each holds: works for every family and for wrappers (timm's classifier)."""
    modules = dict(backbone.named_modules())
    sites = []
    for path, module in modules.items():
        m = _BLOCK.search(path)
        if m is None:
            continue
        inline = []
        for sub, child in module.named_modules():
            if isinstance(child, InLineAttention) and _BRANCH.search(sub):
                inline.append(f'{path}.{sub}')
        sites.append(AttentionSite(int(m['stage'] or 0), int(m['block']), path, tuple(inline)))
    return sites


def _describe(sites: Sequence[AttentionSite]) -> str:
    pairs = [f'({s.stage}, {s.block})' for s in sites if s.inline]
    return ', '.join(pairs) if pairs else 'none'


def find_attention(backbone: nn.Module, stage: int, block: int,
                   branch: int = 0) -> Tuple[str, InLineAttention]:
    """The module path and the :class:`InLineAttention` of block ``block`` of stage
    ``stage`` (branch ``branch`` of an InLine-CSwin block).

    Raises:
        AttentionSiteError: no such block, a Softmax block, or no such branch; the message
            lists the (stage, block) pairs that are InLine.
    """
    sites = attention_sites(backbone)
    if not sites:
        raise AttentionSiteError(f'{type(backbone).__name__} has no blocks at module paths '
                                 '*.blocks.<j>: not an InLine backbone')
    site = next((s for s in sites if (s.stage, s.block) == (stage, block)), None)
    available = f'InLine (stage, block) pairs: {_describe(sites)}'
    if site is None:
        stages = sorted({s.stage for s in sites})
        raise AttentionSiteError(f'{type(backbone).__name__} has no block {block} in stage '
                                 f'{stage} (stages {stages}); {available}')
    if not site.inline:
        raise AttentionSiteError(f'stage {stage} block {block} ({site.path}) is a Softmax '
                                 f'block: its attention is not InLine. {available}')
    if not 0 <= branch < len(site.inline):
        raise AttentionSiteError(f'stage {stage} block {block} has {len(site.inline)} InLine '
                                 f'branch(es) (0..{len(site.inline) - 1}), not {branch}')
    path = site.inline[branch]
    return path, backbone.get_submodule(path)


# --------------------------------------------------------------------------- capture
@dataclass
class ImageTokens:
    """One image's valid tokens of a captured call, per head, in float64.

    Attributes:
        q, k, v (Tensor): ``(heads, n, d)``: the raw projections (before any kernel),
            prefix tokens first, then the image's ``h x w`` tokens row-major.
        grid (tuple[int, int]): ``(h, w)``, the image's region of the map.
        prefix (int): Tokens before the map (InLine-DeiT's class token).
        token_mean (Tensor): ``(C,)`` the mean the local kernels are predicted from (None
            for a block without the local term).
        index (Tensor): ``(n,)`` these tokens' positions in the call's ``N`` tokens.
    """

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    grid: Tuple[int, int]
    prefix: int
    token_mean: torch.Tensor
    index: torch.Tensor


@dataclass
class Capture:
    """One InLine attention call of a backbone's forward pass (:func:`capture_attention`).

    Attributes:
        module (InLineAttention): The attention called.
        path (str): Its module path.
        stage, block, branch (int): Where it is.
        qkv (Tensor): ``(B, N, 3C)`` the raw projection output it received (a copy).
        hw (tuple[int, int]): The map size ``(H, W)``; ``N = prefix + H * W``.
        token_mean (Tensor): ``(B, C)`` the mean its local kernels were predicted from
            (None for a block without the local term).
        valid (ValidMap): Each image's region of the map (``NO_PADDING``: all of it).
        num_prefix_tokens (int): Tokens before the map (InLine-DeiT's class token).
        output (Tensor): ``(B, N, C)`` what the call returned (before any projection).
        input_hw (tuple[int, int]): The backbone input's size.
    """

    module: InLineAttention
    path: str
    stage: int
    block: int
    branch: int
    qkv: torch.Tensor
    hw: Tuple[int, int]
    token_mean: torch.Tensor
    valid: ValidMap
    num_prefix_tokens: int
    output: torch.Tensor
    input_hw: Tuple[int, int]

    @property
    def num_heads(self) -> int:
        return self.module.num_heads

    @property
    def scale(self) -> float:
        return self.module.scale

    def qkv_heads(self) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``q``, ``k``, ``v`` as ``(B, heads, N, d)`` views of :attr:`qkv`."""
        b, n, c3 = self.qkv.shape
        heads = self.num_heads
        return self.qkv.view(b, n, 3, heads, c3 // 3 // heads).permute(2, 0, 3, 1, 4).unbind(0)

    def grid_of(self, image: int) -> Tuple[int, int]:
        """Image ``image``'s ``(h, w)`` region of the map."""
        if not self.valid.is_padded:
            return tuple(self.hw)
        return tuple(self.valid.host_sizes()[image])

    def image(self, image: int = 0) -> ImageTokens:
        """Image ``image``'s valid tokens, per head, in float64."""
        b = self.qkv.shape[0]
        if not 0 <= image < b:
            raise IndexError(f'the captured batch has {b} image(s); image {image} is not one')
        p = self.num_prefix_tokens
        h, w = self.grid_of(image)
        rows = torch.arange(h).view(h, 1) * self.hw[1] + torch.arange(w).view(1, w)
        index = torch.cat([torch.arange(p), p + rows.flatten()])
        q, k, v = (t[image][:, index].double() for t in self.qkv_heads())
        mean = None if self.token_mean is None else self.token_mean[image].double()
        return ImageTokens(q, k, v, (h, w), p, mean, index)


def capture_attention(backbone: nn.Module, x: torch.Tensor, stage: int, block: int,
                      branch: int = 0, valid_sizes=None) -> Capture:
    """Run ``backbone`` on ``x`` and read the call of the InLine attention of block
    ``block`` of stage ``stage`` (branch ``branch`` of an InLine-CSwin block).

    The call is read through :func:`~inline_mm.models.attention.record_calls`, whose record
    is this call's own: other threads running the same backbone at the same time (a
    server's other requests) neither see it nor change it. The call is the same whichever
    ``impl`` runs. Runs under ``torch.no_grad()`` in the model's current mode (``eval()`` it
    first: dropout). ``valid_sizes`` goes to the backbone (each image's ``(h, w)`` in a
    padded batch; by default the backbone reads the padding from the input).
    """
    path, attn = find_attention(backbone, stage, block, branch)
    window = getattr(attn, 'window_size', None)
    if window is not None:
        raise AttentionSiteError(f'{path} attends within {window}x{window} windows '
                                 "(inline_cfg window_size): its maps are per window; use a "
                                 'global InLine block (window_size=None)')
    with torch.no_grad(), record_calls(attn) as record:
        backbone(x) if valid_sizes is None else backbone(x, valid_sizes=valid_sizes)
    call = record.last(attn)
    if call is None:
        raise AttentionSiteError(f'{path} was not called by the forward pass: the backbone '
                                 'stops after its last output (out_indices); build it with '
                                 'out_indices reaching this block')
    mean = None if call.token_mean is None else call.token_mean.detach().clone()
    return Capture(attn, path, stage, block, branch, call.qkv().clone(),
                   tuple(int(s) for s in call.hw), mean, call.valid, attn.num_prefix_tokens,
                   call.output.detach().clone(), tuple(x.shape[-2:]))


# --------------------------------------------------------------------------- weights
def _rows(t: torch.Tensor, queries) -> torch.Tensor:
    return t if queries is None else t[:, torch.as_tensor(queries, dtype=torch.long)]


def inline_weights(q: torch.Tensor, k: torch.Tensor, scale: float, queries=None,
                   phi: Optional[Callable] = None) -> torch.Tensor:
    """InLine's weights ``(heads, m, n)``: ``(s / n) phi(q_i) . (phi(k_j) - mean phi(k)) +
    1 / n`` for the query rows ``queries`` (token indices; None: all) over all ``n``
    keys of ``q``, ``k`` ``(heads, n, d)``."""
    if phi is not None:
        q, k = phi(q), phi(k)
    n = k.shape[-2]
    centred = k - k.mean(dim=-2, keepdim=True)
    return (scale / n) * _rows(q, queries) @ centred.transpose(-2, -1) + 1.0 / n


def linear_weights(q: torch.Tensor, k: torch.Tensor, queries=None,
                   phi: Optional[Callable] = torch.relu, eps: float = LINEAR_EPS) -> torch.Tensor:
    """Normalised linear attention's weights ``(heads, m, n)``: ``phi(q_i) . phi(k_j) /
    (n guard(phi(q_i) . mean_j' phi(k_j')))``, ``guard`` the sign-keeping floor at ``eps``
    (:func:`guard_denominator`); without the floor the rows sum to 1. ``phi=None``: the
    identity."""
    if phi is not None:
        q, k = phi(q), phi(k)
    scores = _rows(q, queries) @ k.transpose(-2, -1)
    n = k.shape[-2]
    return scores / (n * guard_denominator(scores.mean(dim=-1, keepdim=True), eps))


def softmax_weights(q: torch.Tensor, k: torch.Tensor, scale: float, queries=None) -> torch.Tensor:
    """Softmax attention's weights ``(heads, m, n)``: ``softmax_j(s q_i . k_j)``."""
    return torch.softmax(scale * _rows(q, queries) @ k.transpose(-2, -1), dim=-1)


def block_weights(capture: Capture, image: int = 0, queries=None) -> torch.Tensor:
    """``(heads, m, n)``: the weights the block itself applies to V in its global term, for
    image ``image``'s query rows ``queries`` (None: all) over its tokens: InLine's, or
    with ``attention='linear'`` the linear ones, on the block's kernel phi."""
    attn = capture.module
    tokens = capture.image(image)
    _, phi = _kernel_of(attn)
    if getattr(attn, 'attention', 'inline') == 'linear':
        return linear_weights(tokens.q, tokens.k, queries, phi)
    return inline_weights(tokens.q, tokens.k, capture.scale, queries, phi)


def local_kernels(attn: InLineAttention, token_mean: torch.Tensor) -> Optional[torch.Tensor]:
    """The ``(C, 3, 3)`` depthwise kernel of the block's local term for a ``(C,)`` token
    mean (None where the block predicts none): the predicted kernel
    (``attn.predict_kernels``) plus the LePE kernel where the block has one (InLine-CSwin);
    None for a block without a local term."""
    kernels = None
    if getattr(attn, 'local_residual', True) and getattr(attn, 'residual', None) is not None \
            and token_mean is not None:
        mean = token_mean.to(next(attn.residual.parameters()).dtype).view(1, -1)
        with torch.no_grad():
            kernels = attn.predict_kernels(mean)[0].double()
    lepe = getattr(attn, 'lepe', None)
    if lepe is not None:
        lk = lepe.weight.detach().double().view(attn.dim, 3, 3)
        kernels = lk if kernels is None else kernels + lk
    return kernels


def head_kernel(kernels: torch.Tensor, num_heads: int, head: Optional[int] = None) -> torch.Tensor:
    """A ``(3, 3)`` view of ``(C, 3, 3)`` kernels: the mean over head ``head``'s channels,
    or over all channels (None)."""
    if head is None:
        return kernels.mean(0)
    d = kernels.shape[0] // num_heads
    return kernels[head * d:(head + 1) * d].mean(0)


def _kernel_of(attn) -> Tuple[str, Optional[Callable]]:
    """The block's kernel name and ``phi`` (None for the identity)."""
    name = getattr(attn, 'kernel', 'identity')
    phi = getattr(attn, 'phi', None)
    if name == 'identity' or phi is None:
        return 'identity', None
    return name, phi


def map_stride(input_hw: Sequence[int], map_hw: Sequence[int]) -> int:
    """The pixels per token of a map: the power of two ``s`` with ``ceil(input / s)`` equal
    to the map's size on both sides (the backbones pad to their patch size and halve)."""
    for s in (2 ** i for i in range(8)):
        if all(math.ceil(a / s) == b for a, b in zip(input_hw, map_hw)):
            return s
    raise ValueError(f'a {tuple(map_hw)} map is not a power-of-two reduction of a '
                     f'{tuple(input_hw)} input')


@dataclass
class AttentionMaps:
    """The maps of some queries of one image (:func:`attention_maps`).

    Attributes:
        queries (list[int]): The query tokens, as indices into the image's tokens (prefix
            first, then the grid row-major).
        grid (tuple[int, int]): The image's ``(h, w)`` token grid.
        stride (int): Input pixels per token.
        head (int, optional): The head shown; None: the mean over heads.
        weights (dict[str, Tensor]): Per method of :data:`METHODS`, ``(m, n)`` float64:
            each query's weights over the image's ``n`` tokens (prefix first).
        kernel (Tensor, optional): ``(3, 3)`` the local kernel (same for every query);
            None without a local term.
        linear_kernel (str): The kernel the linear weights used (``'relu'`` where the block's
            is the identity).
        kernel_name (str): The block's own kernel.
        attention (str): What the block computes (``'inline'`` or ``'linear'``).
        lepe (bool): Whether :attr:`kernel` includes a LePE kernel.
        prefix_tokens (int): Tokens before the grid.
        floored (int): Linear rows whose normaliser the floor changed (they do not sum
            to 1; all-zero rows among them have no distribution).
        query_scales (list[float]): The factor each query's ``q`` was multiplied by.
    """

    queries: List[int]
    grid: Tuple[int, int]
    stride: int
    head: Optional[int]
    weights: Dict[str, torch.Tensor]
    kernel: Optional[torch.Tensor]
    linear_kernel: str
    kernel_name: str
    attention: str
    lepe: bool
    prefix_tokens: int
    floored: int = 0
    query_scales: List[float] = field(default_factory=list)

    def grid_map(self, method: str, row: int) -> torch.Tensor:
        """``(h, w)``: query ``row``'s weights on the patch keys."""
        return self.weights[method][row, self.prefix_tokens:].view(*self.grid)

    def prefix(self, method: str, row: int) -> torch.Tensor:
        """``(prefix_tokens,)``: query ``row``'s weights on the prefix keys (class token)."""
        return self.weights[method][row, :self.prefix_tokens]

    def query_cell(self, row: int) -> Optional[Tuple[int, int]]:
        """Query ``row``'s ``(r, c)`` on the grid (None for a prefix token)."""
        t = self.queries[row] - self.prefix_tokens
        return None if t < 0 else divmod(t, self.grid[1])

    def spread(self, method: str) -> float:
        """Mean total-variation distance between the queries' distributions (0: every query
        gets the same distribution; 1: disjoint), over all pairs of queries."""
        w = self.weights[method]
        m = w.shape[0]
        if m < 2:
            return 0.0
        d = 0.5 * (w[:, None] - w[None]).abs().sum(-1)
        return float(d.sum() / (m * (m - 1)))


def attention_maps(capture: Capture, queries: Sequence, image: int = 0,
                   head: Optional[int] = None,
                   query_scales: Optional[Sequence[float]] = None) -> AttentionMaps:
    """InLine, linear and Softmax weights and the local kernel for some queries of image
    ``image`` of a capture.

    Args:
        capture (Capture): From :func:`capture_attention`.
        queries (sequence): Each a grid cell ``(r, c)`` of the image's region, or an int:
            a token index of the image (``0`` is InLine-DeiT's class token).
        image (int): Which image of the batch. Default: 0.
        head (int, optional): One head; None: the mean over heads (rows still sum to 1).
        query_scales (sequence[float], optional): One factor per query multiplying its raw
            ``q`` (before any kernel): ``q`` and ``2 q`` get one linear-attention row but
            two InLine rows, the non-injectivity of the paper. Default: all 1 (the block's
            own queries).
    """
    attn = capture.module
    tokens = capture.image(image)
    h, w = tokens.grid
    p = tokens.prefix
    n = tokens.q.shape[1]
    heads = capture.num_heads
    if head is not None and not 0 <= head < heads:
        raise ValueError(f'head {head} does not exist: the block has {heads} heads '
                         f'(0..{heads - 1}); leave it out for the mean over heads')
    index = []
    for qy in queries:
        if isinstance(qy, (tuple, list)):
            r, c = (int(v) for v in qy)
            if not (0 <= r < h and 0 <= c < w):
                raise ValueError(f'query cell {(r, c)} is outside the image\'s {h}x{w} grid')
            index.append(p + r * w + c)
        else:
            if not 0 <= int(qy) < n:
                raise ValueError(f'query token {qy} is outside the image\'s {n} tokens')
            index.append(int(qy))
    q = tokens.q
    if query_scales is not None:
        if len(query_scales) != len(index):
            raise ValueError(f'{len(query_scales)} query scales for {len(index)} queries')
        # The scaled queries are extra rows of q; keys stay the image's tokens.
        q = torch.cat([q, q[:, index] * torch.tensor(query_scales, dtype=q.dtype)[:, None]], 1)
        index_rows = list(range(n, n + len(index)))
    else:
        index_rows = index
    kernel_name, phi = _kernel_of(attn)
    attention = getattr(attn, 'attention', 'inline')
    if attention == 'linear' or phi is not None:
        linear_phi, linear_kernel = phi, kernel_name
    else:
        linear_phi, linear_kernel = torch.relu, 'relu'
    scale = capture.scale
    # Each function reads the query rows of its first argument against every key.
    qr, k = q[:, torch.as_tensor(index_rows, dtype=torch.long)], tokens.k
    raw = dict(inline=inline_weights(qr, k, scale, phi=phi),
               linear=linear_weights(qr, k, phi=linear_phi),
               softmax=softmax_weights(qr, k, scale))
    lq = qr if linear_phi is None else linear_phi(qr)
    lk = k if linear_phi is None else linear_phi(k)
    floored = int(((lq @ lk.mean(dim=-2, keepdim=True).transpose(-2, -1)).abs()
                   < LINEAR_EPS).sum())
    pick = (lambda a: a.mean(0)) if head is None else (lambda a: a[head])
    weights = {name: pick(a) for name, a in raw.items()}
    kernels = local_kernels(attn, tokens.token_mean)
    kernel = None if kernels is None else head_kernel(kernels, heads, head)
    return AttentionMaps(index, (h, w), map_stride(capture.input_hw, capture.hw), head, weights,
                         kernel, linear_kernel, kernel_name, attention,
                         getattr(attn, 'lepe', None) is not None, p, floored,
                         list(query_scales) if query_scales is not None else [1.0] * len(index))


# --------------------------------------------------------------------------- inputs
#: ImageNet mean and std (RGB, 0-255): what every shipped config's data preprocessor uses
IMAGENET_MEAN = (123.675, 116.28, 103.53)
IMAGENET_STD = (58.395, 57.12, 57.375)


@dataclass
class Preprocess:
    """How an image becomes the backbone's input, as a config's test pipeline does it.

    Attributes:
        short_side (int, optional): Resize keeping the aspect so the short side is this.
        scale (tuple[int, int], optional): mmcv's ``Resize(scale=(a, b), keep_ratio=True)``:
            the largest size with long side <= max(a, b) and short side <= min(a, b);
            with ``keep_ratio=False`` exactly ``(w, h) = scale``.
        keep_ratio (bool): See ``scale``.
        mean, std (tuple[float]): RGB normalisation (0-255 values).
        size_divisor (int, optional): Zero-pad bottom/right to a multiple (the batch
            padding of mmdet's data preprocessor; the padding-aware backbones ignore it).
    """

    short_side: Optional[int] = None
    scale: Optional[Tuple[int, int]] = None
    keep_ratio: bool = True
    mean: Tuple[float, ...] = IMAGENET_MEAN
    std: Tuple[float, ...] = IMAGENET_STD
    size_divisor: Optional[int] = None

    def resized_size(self, hw: Tuple[int, int]) -> Tuple[int, int]:
        """The ``(h, w)`` an ``hw`` image is resized to."""
        h, w = hw
        if self.short_side is not None:
            f = self.short_side / min(h, w)
        elif self.scale is not None and not self.keep_ratio:
            return int(self.scale[1]), int(self.scale[0])
        elif self.scale is not None:
            f = min(max(self.scale) / max(h, w), min(self.scale) / min(h, w))
        else:
            return h, w
        return max(1, int(h * f + 0.5)), max(1, int(w * f + 0.5))

    @classmethod
    def from_config(cls, cfg) -> 'Preprocess':
        """The ``Resize`` of a config's test pipeline and its data preprocessor's
        ``mean``, ``std`` and ``pad_size_divisor``."""
        pipeline = cfg.get('test_pipeline')
        if pipeline is None:
            pipeline = cfg.get('test_dataloader', {}).get('dataset', {}).get('pipeline', [])
        resize = next((t for t in pipeline if t.get('type') == 'Resize'), None)
        pre = cfg.get('model', {}).get('data_preprocessor') or {}
        kw = dict(mean=tuple(pre.get('mean', IMAGENET_MEAN)),
                  std=tuple(pre.get('std', IMAGENET_STD)),
                  size_divisor=pre.get('pad_size_divisor'))
        if resize is not None and resize.get('scale') is not None:
            scale = resize['scale']
            scale = (scale, scale) if isinstance(scale, int) else tuple(scale)
            kw.update(scale=scale, keep_ratio=bool(resize.get('keep_ratio', False)))
        return cls(**kw)


def to_rgb(im):
    """A PIL image as RGB, transparent pixels composited over white (how a browser shows
    them on a white page), not read as the colour they happen to store."""
    from PIL import Image
    if im.mode == 'P' and 'transparency' in im.info:
        im = im.convert('RGBA')
    if im.mode in ('RGBA', 'LA', 'PA', 'RGBa', 'La'):
        rgba = im.convert('RGBA')
        white = Image.new('RGBA', rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert('RGB')
    return im.convert('RGB')


def load_image(path: str):
    """An image file as an ``(H, W, 3)`` uint8 RGB array (:func:`to_rgb`)."""
    import numpy as np
    from PIL import Image, UnidentifiedImageError
    if not os.path.isfile(path):
        raise FileNotFoundError(f'image not found: {path!r}')
    try:
        with Image.open(path) as im:
            return np.asarray(to_rgb(im))
    except (UnidentifiedImageError, OSError) as e:
        raise ValueError(f'{path!r} is not an image PIL can read ({e})') from None


def prepare_image(image, pre: Preprocess) -> Tuple[torch.Tensor, Tuple[int, int]]:
    """An ``(H, W, 3)`` uint8 image -> the ``(1, 3, H', W')`` normalised, padded input and
    the resized ``(h, w)`` inside it."""
    import numpy as np
    from PIL import Image
    h, w = pre.resized_size(image.shape[:2])
    if (h, w) != tuple(image.shape[:2]):
        image = np.asarray(Image.fromarray(image).resize((w, h), Image.BILINEAR))
    x = torch.from_numpy(np.array(image)).permute(2, 0, 1).float()
    x = (x - torch.tensor(pre.mean).view(3, 1, 1)) / torch.tensor(pre.std).view(3, 1, 1)
    if pre.size_divisor:
        d = pre.size_divisor
        x = torch.nn.functional.pad(x, (0, -w % d, 0, -h % d))
    return x.unsqueeze(0), (h, w)


def grid_points(n: int, image_hw: Tuple[int, int]) -> List[Tuple[float, float]]:
    """``n x n`` evenly spaced ``(x, y)`` points of an image, row by row (cell centres)."""
    if n < 1:
        raise ValueError(f'--grid needs N >= 1, got {n}')
    ih, iw = image_hw
    return [((j + 0.5) * iw / n, (i + 0.5) * ih / n) for i in range(n) for j in range(n)]


def point_to_cell(point: Tuple[float, float], image_hw: Tuple[int, int],
                  resized_hw: Tuple[int, int], stride: int,
                  grid: Tuple[int, int]) -> Tuple[int, int]:
    """The ``(r, c)`` token of a map of ``stride`` pixels per token (on the resized image)
    that an ``(x, y)`` pixel of the original image falls in."""
    x, y = point
    ih, iw = image_hw
    if not (0 <= x < iw and 0 <= y < ih):
        raise ValueError(f'point ({x:g}, {y:g}) is outside the {iw}x{ih} image (x in 0..{iw - 1}, '
                         f'y in 0..{ih - 1})')
    r = min(int(y * resized_hw[0] / ih // stride), grid[0] - 1)
    c = min(int(x * resized_hw[1] / iw // stride), grid[1] - 1)
    return r, c


def _family_and_args(name: str, arch: str) -> Tuple[str, dict]:
    from .models.families import FAMILIES, model_name
    if name in FAMILIES:
        family = FAMILIES[name]
        if arch == 'smoke':
            return name, dict(family.smoke)
        if arch not in family.presets:
            raise ValueError(f'{name} has no arch {arch!r}; choose one of '
                             f'{sorted(family.presets)} or smoke')
        return name, dict(arch=arch)
    known = {model_name(fam, preset): (fam, preset)
             for fam, family in FAMILIES.items() for preset in list(family.presets) + ['smoke']}
    if name not in known:
        raise ValueError(f'unknown backbone {name!r}: give a family ({", ".join(FAMILIES)}) '
                         'with an arch, or a timm-style name such as '
                         f'{", ".join(sorted(known)[:4])}, ...')
    return _family_and_args(*known[name])


def build_backbone(config: Optional[str] = None, model: Optional[str] = None,
                   arch: str = 'tiny', checkpoint: Optional[str] = None,
                   random_weights: bool = False, seed: int = 0,
                   cfg_options: Optional[dict] = None):
    """The backbone to map, in eval mode, and the config (None without one).

    Args:
        config (str, optional): An mmdet/mmseg config: its ``model.backbone`` is built.
        model (str, optional): Instead of a config: a family name (``'InLineSwin'``) with
            ``arch`` (a preset, or ``'smoke'``: the family's tiny test model), or a timm-style
            name (``'inline_swin_tiny'``).
        arch (str): See ``model``. Default: ``'tiny'``.
        checkpoint (str, optional): Weights: an official ImageNet file, an mm checkpoint of a
            trained detector/segmentor (``state_dict``, ``backbone.`` prefix), a converted
            file, or ``inline://<name>``; loaded by :func:`.models.load_pretrained`, which
            refuses a file of another variant. Without it the config's
            ``init_cfg=dict(type='Pretrained', ...)`` is used.
        random_weights (bool): Use the default initialisation (seed ``seed``) instead of
            weights; the maps then show the mechanics only.
        cfg_options (dict, optional): Merged into the config.
    """
    from .models.checkpoint import load_pretrained
    from .models.families import FAMILIES
    cfg = None
    if (config is None) == (model is None):
        raise ValueError('give either a config file or a backbone name')
    if config is not None:
        from mmengine.config import Config
        if not os.path.isfile(config):
            raise FileNotFoundError(f'config not found: {config!r}')
        cfg = Config.fromfile(config)
        if cfg_options:
            cfg.merge_from_dict(cfg_options)
        args = dict(cfg.model.backbone)
        name = args.pop('type')
        if name not in FAMILIES:
            raise ValueError(f'{config}: its backbone {name!r} is not an InLine backbone '
                             f'({", ".join(FAMILIES)})')
    else:
        name, args = _family_and_args(model, arch)
    init_cfg = args.pop('init_cfg', None)
    torch.manual_seed(seed)
    backbone = FAMILIES[name].cls(**args)
    if checkpoint is not None:
        load_pretrained(backbone, checkpoint)
    elif random_weights:
        backbone.init_weights()
    elif isinstance(init_cfg, dict) and init_cfg.get('type') == 'Pretrained':
        load_pretrained(backbone, **{k: v for k, v in init_cfg.items() if k != 'type'})
    else:
        raise ValueError('no weights: pass --checkpoint FILE (an official ImageNet file or a '
                         'trained mm checkpoint), or --random-weights for the mechanics only')
    return backbone.eval(), cfg
