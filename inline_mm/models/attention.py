"""The attention shared by the InLine families, and the call contract every attention
of every family keeps.

The contract (written here once; the family files refer to it):

* an attention is an ``nn.Module`` built as ``cls(dim, num_heads, *, qkv_bias,
  attn_drop, proj_drop, **options)`` and called as ``attn(x, hw, token_mean=None,
  valid=None)`` on ``(B, N, C)`` tokens of an ``hw = (H, W)`` map, row-major,
  returning ``(B, N, C)``;
* ``token_mean`` ``(B, C)`` feeds InLine's local kernels (the others ignore it);
* ``valid`` (:class:`.padding.ValidMap`) gives each image's region of a padded
  batch: statistics and keys stay inside it, and every image gets what it would
  get alone. ``valid.is_padded`` False (:data:`.padding.NO_PADDING`) is the plain
  path. Tokens outside an image may be anything finite on the way in, and their
  outputs are ignored; the caller's tensors are never written;
* an attention that runs on a projection made elsewhere (InLine-CSwin's stripes: the
  block keeps qkv) offers ``attend(qkv, hw, token_mean=None, valid=None)`` on the
  ``(B, N, 3C)`` projection output; InLine attention without a projection of its own
  takes the block's as ``projection=`` (the kernel folds it in);
* a family maps its block types (:data:`INLINE`, :data:`SOFTMAX`) to classes in a
  table named ``ATTENTION_TYPES``.

InLine attentions carry the paper's switches (:data:`INLINE_OPTIONS`: ``attention``,
``kernel``, ``local_residual``, ``window_size``), set per stage by a backbone's
``inline_cfg`` (:func:`.base.parse_inline_cfg`); the defaults are the released model.

Which form of the formula runs is the ``impl`` option (:func:`.impl.choose_path`):
the same code runs whether or not a hook, a profiler or a dispatch mode watches. The
formula itself is :mod:`.inline_function`. Attention maps read a call through
:func:`record_calls` (:class:`AttentionCall`): the record belongs to the caller's thread
(or asyncio task), never to the module, so requests that share one model in a server
never see each other's calls.
"""
import contextlib
import contextvars
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from .impl import check_impl, choose_path
from .inline_function import KERNELS, apply_kernel, inline_kernel, plain_qkv
from .layers import crop, round_up, symbolic, window_merge, window_partition
from .padding import NO_PADDING, ValidMap
from .precision import autocast_dtype, no_autocast

__all__ = ['INLINE', 'SOFTMAX', 'InLineAttention', 'AttentionCall', 'CallRecord',
           'record_calls', 'INLINE_OPTIONS', 'check_inline_options']

#: the two block types of ``stage_types``
INLINE, SOFTMAX = 'inline', 'softmax'

#: the paper's switches of an InLine block and their defaults (the released models); a
#: backbone's ``inline_cfg`` sets them (see :func:`check_inline_options`)
INLINE_OPTIONS: Dict[str, Any] = dict(attention='inline', kernel='identity',
                                      local_residual=True, window_size=None)
_ATTENTIONS = ('inline', 'linear')


def check_inline_options(options: Optional[dict], where: str = 'inline_cfg',
                         window: bool = True) -> Dict[str, Any]:
    """``options`` (a dict of the switches, or None) checked and completed with the
    defaults of :data:`INLINE_OPTIONS`; ``ValueError`` naming the allowed keys or values
    otherwise (``where``: how the message names the dict; ``window``: whether
    ``window_size`` may be set, InLine-Swin only)."""
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise ValueError(f'{where} must be a dict of {"/".join(INLINE_OPTIONS)} (or None), '
                         f'got {type(options).__name__} {options!r}')
    unknown = sorted(set(options) - set(INLINE_OPTIONS))
    if unknown:
        raise ValueError(f'{where}: unknown key(s) {", ".join(map(repr, unknown))}; allowed: '
                         f'{", ".join(INLINE_OPTIONS)}')
    out = dict(INLINE_OPTIONS, **options)
    if out['attention'] not in _ATTENTIONS:
        raise ValueError(f"{where}: attention={out['attention']!r}; allowed: "
                         f'{", ".join(map(repr, _ATTENTIONS))}')
    if out['kernel'] not in KERNELS:
        raise ValueError(f"{where}: kernel={out['kernel']!r}; allowed: "
                         f'{", ".join(map(repr, KERNELS))}')
    if not isinstance(out['local_residual'], bool):
        raise ValueError(f"{where}: local_residual={out['local_residual']!r}; allowed: "
                         'True, False')
    ws = out['window_size']
    if ws is not None:
        if not window:
            raise ValueError(f'{where}: window_size={ws!r}: windowed InLine blocks are an '
                             'InLine-Swin ablation; this family\'s InLine blocks are global '
                             '(allowed: None)')
        if isinstance(ws, bool) or not isinstance(ws, int) or ws < 1:
            raise ValueError(f'{where}: window_size={ws!r}; allowed: None (global) or an '
                             'int >= 1 (the window side in tokens)')
    return out


class AttentionCall(NamedTuple):
    """One call of an :class:`InLineAttention`, kept by :func:`record_calls`: what
    :mod:`inline_mm.visualization.attention_maps` reads (the same on either ``impl``; nothing is
    copied)."""

    #: ``(B, N, C)`` the attention's input
    x: torch.Tensor
    #: the qkv projection it applied (its own, or the block's)
    projection: nn.Linear
    #: the map size ``(H, W)``
    hw: Tuple[int, int]
    #: ``(B, C)`` the mean its local kernels were predicted from (None without them)
    token_mean: Optional[torch.Tensor]
    #: each image's region of the map
    valid: ValidMap
    #: ``(B, N, C)`` the attention's output before dropout and the output projection
    output: torch.Tensor

    def qkv(self) -> torch.Tensor:
        """``(B, N, 3C)`` the raw projection output (before any kernel phi)."""
        with torch.no_grad():
            return self.projection(self.x)


class CallRecord:
    """The calls of some :class:`InLineAttention` modules made inside one
    :func:`record_calls` block, in call order per module."""

    def __init__(self, modules, parent: Optional['CallRecord'] = None):
        self._calls: Dict[int, List[AttentionCall]] = {id(m): [] for m in modules}
        self._parent = parent

    def add(self, module: 'InLineAttention', call: AttentionCall) -> None:
        """Keep ``call`` if ``module`` is watched here (and in any enclosing record)."""
        calls = self._calls.get(id(module))
        if calls is not None:
            calls.append(call)
        if self._parent is not None:
            self._parent.add(module, call)

    def calls(self, module: 'InLineAttention') -> List[AttentionCall]:
        """``module``'s calls so far (empty if it was not called)."""
        if id(module) not in self._calls:
            raise KeyError(f'{type(module).__name__} at {id(module):#x} is not recorded here: '
                           'pass it to record_calls')
        return self._calls[id(module)]

    def last(self, module: 'InLineAttention') -> Optional[AttentionCall]:
        """``module``'s last call, or None if it was not called."""
        calls = self.calls(module)
        return calls[-1] if calls else None


#: the record of the running :func:`record_calls` block of this thread / asyncio task (a
#: context variable: another thread's forward on the same modules never reaches it)
_RECORD: contextvars.ContextVar[Optional[CallRecord]] = contextvars.ContextVar(
    'inline_mm_attention_record', default=None)


@contextlib.contextmanager
def record_calls(*modules: 'InLineAttention') -> Iterator[CallRecord]:
    """Keep every call of ``modules`` that forward passes make in this thread (or asyncio
    task) inside the ``with`` block::

        with record_calls(attn) as record:
            backbone(x)
        call = record.last(attn)        # AttentionCall, or None if attn was not called

    The record is the caller's, not the modules': other threads running the same model at
    the same time are neither recorded nor disturbed, and the forward runs as always
    (outside a block, one context-variable read per call). Blocks nest (each keeps its own
    modules' calls)."""
    token = _RECORD.set(CallRecord(modules, _RECORD.get()))
    try:
        yield _RECORD.get()
    finally:
        _RECORD.reset(token)


class InLineAttention(nn.Module):
    """InLine attention over a whole ``H x W`` token map (Han et al., NeurIPS 2024,
    arXiv 2412.06590), with the paper's switches.

    Parameter names follow the official code (``qkv``, ``proj``, ``residual.{0,2}``;
    optional ``lepe`` for InLine-CSwin's locally enhanced positional term).

    Args:
        dim (int): Channels ``C``.
        num_heads (int): Heads; must divide ``dim``.
        qkv_bias (bool): Bias of the qkv projection. Default: True.
        proj (bool): Whether to own the qkv and output projections. InLine-CSwin
            keeps them in the block (shared by its branches) and passes its qkv as
            ``projection``. Default: True.
        lepe (bool): Add InLine-CSwin's depthwise 3x3 LePE of V. Default: False.
        num_prefix_tokens (int): Tokens before the ``H x W`` map (InLine-DeiT's class
            token): in the linear term, outside the local one. Default: 0.
        attn_drop (float): Dropout on the attention output before the projection.
            Default: 0.
        proj_drop (float): Dropout after the projection. Default: 0.
        attention (str): ``'inline'`` (the released model) or ``'linear'``: normalised
            linear attention ``phi(q_i) S / (phi(q_i) . z)``, ``S = mean_j phi(k_j)^T
            v_j``, ``z = mean_j phi(k_j)``, its normaliser floored sign-preservingly at
            ``|den| >= 1e-6`` (:func:`.inline_function.guard_denominator`). Same
            parameters. Default: ``'inline'``.
        kernel (str): phi applied to q and k after the projection (official
            ``kernel_func``): ``'identity'``, ``'relu'``, ``'leakyrelu'`` (slope 0.01) or
            ``'exp'`` (``exp(0.2 x)``). Default: ``'identity'``.
        local_residual (bool): The predicted 3x3 local term; False builds no
            ``residual`` (the LePE term of ``lepe`` stays: it is CSwin's positional
            term). Default: True.
        window_size (int, optional): Attend within non-overlapping windows of this side
            (no shift; a map side that fits in one window is one window of it; other
            sides are padded to a multiple, the padding outside every statistic), each
            window its own token set: means, statistics, the token mean the local
            kernels are predicted from, and the local term (zero padding at the window
            border). None: global. Default: None.
        impl (str, optional): ``'auto'`` (the kernel on the CPU, the plain form elsewhere),
            ``'plain'`` or ``'kernel'`` (:func:`.impl.choose_path`); None:
            ``$INLINE_MM_IMPL``, else ``'auto'``. In a backbone the backbone's ``impl``
            sets it. Default: None.

    The kernel (:func:`.inline_function.inline_kernel`, which folds the qkv projection in)
    runs the released blocks where ``impl`` resolves to ``'kernel'``; other settings (named
    from the build in :attr:`plain_only` and the repr) run the plain form
    (:func:`.inline_function.plain_qkv`). So a forward hook on ``qkv`` fires on the plain
    form only (the kernel reads its weights); :func:`record_calls` works on both.
    """

    def __init__(self, dim: int, num_heads: int, qkv_bias: bool = True, proj: bool = True,
                 lepe: bool = False, num_prefix_tokens: int = 0, attn_drop: float = 0.,
                 proj_drop: float = 0., attention: str = 'inline', kernel: str = 'identity',
                 local_residual: bool = True, window_size: Optional[int] = None,
                 impl: Optional[str] = None):
        super().__init__()
        if dim % num_heads:
            raise ValueError(f'dim ({dim}) must be divisible by num_heads ({num_heads})')
        options = check_inline_options(
            dict(attention=attention, kernel=kernel, local_residual=local_residual,
                 window_size=window_size), where=type(self).__name__)
        if window_size is not None and num_prefix_tokens:
            raise ValueError('window_size cannot be combined with num_prefix_tokens: a prefix '
                             'token (a class token) belongs to no window')
        self.dim = dim
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.num_prefix_tokens = num_prefix_tokens
        self.attention = options['attention']
        self.kernel = options['kernel']
        self.local_residual = options['local_residual']
        self.window_size = options['window_size']
        self.impl = check_impl(impl)
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias) if proj else None
        # Predicts a 3x3 depthwise kernel per channel from the token mean.
        self.residual = nn.Sequential(
            nn.Conv1d(dim, dim, kernel_size=1, groups=num_heads),
            nn.GELU(),
            nn.Conv1d(dim, dim * 9, kernel_size=1, groups=num_heads)) \
            if self.local_residual else None
        self.lepe = nn.Conv2d(dim, dim, 3, padding=1, groups=dim) if lepe else None
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim) if proj else None
        self.proj_drop = nn.Dropout(proj_drop)

    def __setattr__(self, name: str, value) -> None:
        super().__setattr__(name, value)
        # plain_only is made with qkv at build (after the switches) and kept true after it
        # (a switch set by hand, a qkv swapped for a quantised or a low-rank layer).
        if name == 'qkv' or (name in INLINE_OPTIONS and 'plain_only' in self.__dict__):
            qkv = self._modules.get('qkv')
            #: the settings that rule the kernel out, by name (empty: it can run the module)
            self.plain_only = tuple(k for k in ('attention', 'kernel', 'window_size')
                                    if getattr(self, k) != INLINE_OPTIONS[k]) + (
                ('qkv',) if qkv is not None and type(qkv) is not nn.Linear else ())

    def extra_repr(self) -> str:
        prefix = f', num_prefix_tokens={self.num_prefix_tokens}' if self.num_prefix_tokens else ''
        switches = ''.join(f', {k}={getattr(self, k)!r}' for k, v in INLINE_OPTIONS.items()
                           if getattr(self, k) != v)
        plain = f', plain_only={self.plain_only}' if self.plain_only else ''
        return (f'dim={self.dim}, num_heads={self.num_heads}{prefix}{switches}, '
                f'impl={self.impl!r}{plain}')

    def phi(self, t: torch.Tensor) -> torch.Tensor:
        """The kernel applied to queries and keys (the identity returns ``t``)."""
        return apply_kernel(self.kernel, t)

    def predict_kernels(self, token_mean: torch.Tensor) -> torch.Tensor:
        """``(B, C)`` token mean -> ``(B, C, 3, 3)`` depthwise kernels."""
        if self.residual is None:
            raise RuntimeError('this InLineAttention has no local residual '
                               '(local_residual=False): there are no kernels to predict')
        b = token_mean.shape[0]
        return self.residual(token_mean.unsqueeze(-1)).reshape(b, self.dim, 3, 3)

    def _local_kernels(self, b: int, token_mean: Optional[torch.Tensor]):
        """The local term's ``(B, C, 3, 3)`` kernels (or None) and its bias (LePE's)."""
        kernels = self.predict_kernels(token_mean) if self.local_residual else None
        bias = None
        if self.lepe is not None:
            # conv(V, k_pred) + conv(V, k_lepe) + b is one convolution with k_pred + k_lepe.
            lepe = self.lepe.weight.view(1, self.dim, 3, 3)
            kernels = lepe.expand(b, -1, -1, -1) if kernels is None else kernels + lepe
            bias = self.lepe.bias
        return kernels, bias

    def uses_kernel(self, x: torch.Tensor, valid: ValidMap = NO_PADDING,
                    projection: Optional[nn.Module] = None) -> bool:
        """Whether :meth:`forward` runs the kernel: nothing in :attr:`plain_only`, ``impl``
        choosing it for ``x`` (:func:`.impl.choose_path`), and what it needs of the call:
        ``x`` in the projection's dtype (or, under autocast, both in fp32 or the autocast
        dtype: the kernel then runs in that dtype, :meth:`_kernel`), ``valid``'s sizes on
        the host, a given ``projection`` an ``nn.Linear``. Nothing that watches the model
        changes it."""
        if self.plain_only or choose_path(self.impl, x) != 'kernel':
            return False
        projection = self.qkv if projection is None else projection
        if not ((projection is self.qkv or type(projection) is nn.Linear)
                and valid.sizes is not None):
            return False
        low = autocast_dtype(x.device.type)
        if low is None:
            return x.dtype == projection.weight.dtype
        return {x.dtype, projection.weight.dtype} <= {torch.float32, low}

    def _kernel(self, x: torch.Tensor, hw: Tuple[int, int], token_mean: Optional[torch.Tensor],
                valid: ValidMap, projection: nn.Linear) -> torch.Tensor:
        """The kernel (:func:`.inline_function.inline_kernel`) on ``x``. Under autocast it
        runs in the autocast dtype with autocast off inside: ``x`` and the projection are
        cast once (autocast would cast the projection's input and weights the same way),
        and the kernel keeps its statistics in fp32 as it does for a bf16 model, instead of
        the plain form's casts of K and V, its layout copies and its fp32 round trips."""
        kernels, bias = self._local_kernels(x.shape[0], token_mean)
        weight, qkv_bias = projection.weight, projection.bias
        device = x.device.type
        low = autocast_dtype(device)
        if low is None:
            return inline_kernel(x, weight, qkv_bias, self.num_heads, hw, self.scale, kernels,
                                 bias, self.num_prefix_tokens, valid)
        with no_autocast(device):
            return inline_kernel(x.to(low), weight.to(low),
                                 None if qkv_bias is None else qkv_bias.to(low),
                                 self.num_heads, hw, self.scale, kernels, bias,
                                 self.num_prefix_tokens, valid)

    def attend(self, qkv: torch.Tensor, hw: Tuple[int, int],
               token_mean: Optional[torch.Tensor] = None,
               valid: ValidMap = NO_PADDING) -> torch.Tensor:
        """The attention (after its dropout, before any output projection) of a projection
        output made elsewhere, ``qkv`` ``(B, N, 3C)`` (queries, keys, values, heads
        contiguous within each, before phi; not written), in the plain form: the kernel
        needs the projection's input. ``token_mean``: ``(B, C)`` (``(B, nW, C)`` with
        ``window_size``, :meth:`window_means`), required with the local residual."""
        if token_mean is None and self.local_residual:
            raise ValueError(f'{type(self).__name__}.attend needs the (B, C) token mean the '
                             'local kernels are predicted from')
        if qkv.shape[-1] != 3 * self.dim:
            raise ValueError(f'qkv has {qkv.shape[-1]} channels, expected 3 * {self.dim}')
        return self.attn_drop(self._plain(qkv, hw, token_mean, valid))

    def _plain(self, qkv: torch.Tensor, hw: Tuple[int, int], token_mean: Optional[torch.Tensor],
               valid: ValidMap) -> torch.Tensor:
        if self.window_size is not None:
            return self._attend_windows(qkv, hw, token_mean, valid)
        kernels, bias = self._local_kernels(qkv.shape[0], token_mean)
        return plain_qkv(qkv, self.num_heads, hw, self.scale, kernels, bias,
                         self.num_prefix_tokens, valid.mask, valid.counts, self.attention,
                         self.kernel)

    # ------------------------------------------------------------------ windows
    def window_layout(self, hw: Tuple[int, int]) -> Tuple[int, int, int, int]:
        """Window ``(wh, ww)`` and padded map ``(hp, wp)`` for an ``hw`` map: a side that
        fits in one window is one window of it (as InLine-Swin's softmax windows)."""
        h, w = hw
        ws = self.window_size
        # Branches, not min(ws, h): see WindowAttention.layout (symbolic sizes).
        wh = ws if h > ws else h
        ww = ws if w > ws else w
        hp = h if h <= wh else round_up(h, wh)
        wp = w if w <= ww else round_up(w, ww)
        return wh, ww, hp, wp

    def _window_tokens(self, b: int, hw: Tuple[int, int], valid: ValidMap, device
                       ) -> Tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
        """``(B * nW, wh * ww)`` bool mask of the tokens inside each window's image
        region (its top-left part inside the image and the map) and their ``(B * nW,)``
        counts, or ``(None, None)`` when every window is wholly inside."""
        h, w = hw
        wh, ww, hp, wp = self.window_layout(hw)
        if valid.is_padded:
            pix = F.pad(valid.pixels, (0, wp - w, 0, hp - h))
        elif symbolic(h, w) or hp != h or wp != w:
            rows = torch.arange(hp, device=device) < h
            cols = torch.arange(wp, device=device) < w
            pix = (rows[:, None] & cols[None, :]).expand(b, hp, wp)
        else:
            return None, None
        mask = window_partition(pix[..., None], wh, ww).squeeze(-1)         # (B*nW, N)
        return mask, mask.sum(dim=-1, dtype=torch.float32)

    def _partition(self, t: torch.Tensor, hw: Tuple[int, int]) -> torch.Tensor:
        """``(B, H*W, C')`` -> ``(B * nW, wh * ww, C')``, zero-padded to whole windows."""
        b, _, c = t.shape
        h, w = hw
        wh, ww, hp, wp = self.window_layout(hw)
        t = t.reshape(b, h, w, c)
        if symbolic(h, w) or hp != h or wp != w:
            t = F.pad(t, (0, 0, 0, wp - w, 0, hp - h))
        return window_partition(t, wh, ww)

    def window_means(self, x: torch.Tensor, hw: Tuple[int, int],
                     valid: ValidMap = NO_PADDING) -> torch.Tensor:
        """``(B, H*W, C)`` -> ``(B, nW, C)``: each window's mean over its tokens inside
        the image (a window wholly outside gets 0), in fp32 like :meth:`ValidMap.mean`."""
        b = x.shape[0]
        mask, counts = self._window_tokens(b, hw, valid, x.device)
        windows = self._partition(x, hw).float()                           # (B*nW, N, C)
        if mask is None:
            means = windows.mean(dim=1)
        else:
            windows = torch.where(mask[..., None], windows, windows.new_zeros(()))
            means = windows.sum(dim=1) / counts.clamp_min(1)[:, None]
        return means.to(x.dtype).reshape(b, -1, x.shape[-1])

    def _attend_windows(self, qkv, hw, token_mean, valid) -> torch.Tensor:
        b, n, c3 = qkv.shape
        h, w = hw
        wh, ww, hp, wp = self.window_layout(hw)
        nw = (hp // wh) * (wp // ww)
        kernels = None
        if self.local_residual:
            if token_mean.dim() != 3 or token_mean.shape[1] != nw:
                raise ValueError(f'with window_size={self.window_size} the token mean is each '
                                 f'window\'s: expected (B, {nw}, C) for a {h}x{w} map, got '
                                 f'{tuple(token_mean.shape)} (InLineAttention.window_means)')
            kernels = self.predict_kernels(token_mean.reshape(b * nw, self.dim))
        bias = None
        if self.lepe is not None:
            lepe = self.lepe.weight.view(1, self.dim, 3, 3)
            kernels = lepe.expand(b * nw, -1, -1, -1) if kernels is None else kernels + lepe
            bias = self.lepe.bias
        mask, counts = self._window_tokens(b, hw, valid, qkv.device)
        out = plain_qkv(self._partition(qkv, hw), self.num_heads, (wh, ww), self.scale,
                        kernels, bias, 0, mask, counts, self.attention, self.kernel)
        out = window_merge(out, wh, ww, hp, wp, b)
        return crop(out, h, w).reshape(b, n, self.dim)

    def forward(self, x: torch.Tensor, hw: Tuple[int, int],
                token_mean: Optional[torch.Tensor] = None, valid: ValidMap = NO_PADDING,
                projection: Optional[nn.Linear] = None) -> torch.Tensor:
        """The call of the module docstring; ``token_mean`` defaults to the mean of ``x``
        over each image's tokens (prefix included; InLine-CSwin passes the block input's),
        with ``window_size`` to each window's (:meth:`window_means`); ``projection``: the
        qkv projection of a module built with ``proj=False`` (InLine-CSwin's block keeps
        it), which then returns its output before any output projection."""
        projection = self.qkv if projection is None else projection
        if projection is None:
            raise RuntimeError('InLineAttention(proj=False) has no qkv projection: pass the '
                               "block's as projection=")
        if token_mean is None and self.local_residual:
            token_mean = valid.mean(x) if self.window_size is None \
                else self.window_means(x, hw, valid)
        if self.uses_kernel(x, valid, projection):
            out = self._kernel(x, hw, token_mean, valid, projection)
        else:
            out = self._plain(projection(x), hw, token_mean, valid)
        record = _RECORD.get()
        if record is not None:
            record.add(self, AttentionCall(x, projection, tuple(hw), token_mean, valid, out))
        out = self.attn_drop(out)
        return out if self.proj is None else self.proj_drop(self.proj(out))
