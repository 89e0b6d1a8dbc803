"""The InLine backbones as timm models: the official ImageNet classifier and the
``features_only`` forms.

* :class:`InLineClassifier`: the backbone with the official final norm, global pooling and
  ``head`` (the official classifier's keys), and timm's classifier API;
* :class:`InLineFeatures`: the backbone's own outputs, described by timm's ``FeatureInfo``
  (``features_only=True``);
* :class:`InLineIntermediates`: the classifier's ``forward_intermediates``
  (``features_only=True, feature_cls='getter'``).

Plain modules around a built backbone. Naming, building and registering them in timm are
:mod:`inline_mm.timm`'s. Only timm's public API is used (what ``timm.models`` exports): its
underscore modules move between releases.
"""
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from timm.models import FeatureInfo, adapt_input_conv

from .layers import run_block, to_nchw

__all__ = ['InLineClassifier', 'InLineFeatures', 'InLineIntermediates']


def _take_indices(n: int, indices: Optional[Union[int, Sequence[int]]]) -> List[int]:
    """timm's meaning of ``indices``: None all ``n``, an int the last that many, a
    sequence those (negative from the end)."""
    if indices is None:
        indices = n
    if isinstance(indices, int):
        if not 0 < indices <= n:
            raise ValueError(f'indices={indices}: the model has {n} feature levels')
        return list(range(n - indices, n))
    taken = [i + n if i < 0 else i for i in indices]
    if not taken or any(not 0 <= i < n for i in taken):
        raise ValueError(f'indices {list(indices)} must be within -{n}..{n - 1}')
    return taken


def _stage_output_module(backbone: nn.Module, i: int) -> nn.Module:
    """The last block of stage (block) ``i``: its output is the stage's tokens."""
    stage = backbone._stage_list()[i]
    return stage.blocks[-1] if hasattr(stage, 'blocks') else stage


def _module_name(root: nn.Module, module: nn.Module, prefix: str = '') -> str:
    return prefix + next(n for n, m in root.named_modules() if m is module)


class InLineClassifier(nn.Module):
    """An official InLine ImageNet classifier: the backbone, the official final norm,
    global pooling and a linear ``head``, with timm's classifier API.

    The backbone returns only its last stage (``out_indices=(last,)``), through the
    output norm the official final ``norm`` initialises (InLine-Swin, -CSwin; InLine-PVT
    has no final norm, so none); InLine-DeiT's class token and ``norm`` are read from
    its blocks directly, as its backbone returns patch maps only.

    Args:
        backbone (InLineBackbone): Built with ``out_indices`` = its last stage.
        family (Family): Its entry of :data:`inline_mm.models.FAMILIES`.
        num_classes (int): Classes of ``head``; 0: no head (pooled features).
            Default: 1000.
        global_pool (str, optional): ``'avg'`` (mean of the last map; the official
            pooling of the pyramids), ``'max'``, ``'token'`` (InLine-DeiT's class
            token, its official pooling) or ``''`` (none: ``forward`` returns the
            unpooled features). Default: the official pooling.
        drop_rate (float): Dropout before ``head``. Default: 0.
    """

    def __init__(self, backbone: nn.Module, family, num_classes: int = 1000,
                 global_pool: Optional[str] = None, drop_rate: float = 0.):
        super().__init__()
        last = backbone.num_stages - 1
        if tuple(backbone.out_indices) != (last,):
            raise ValueError(f'the classifier reads the last stage only: build the backbone '
                             f'with out_indices=({last},), got {backbone.out_indices}')
        self.backbone = backbone
        self.tokens = family.out_unit == 'block'
        if self.tokens and not backbone.final_norm:
            raise ValueError('the InLine-DeiT classifier needs the final norm (final_norm=True)')
        # The final norm is the backbone's (official keys); a name, not a second registration.
        if self.tokens:
            self._final_norm = 'norm'
        elif backbone.official_final_norm:
            self._final_norm = f'norm{last}'
        else:
            # InLine-PVT: the official classifier pools the last block's tokens as they are.
            setattr(backbone, f'norm{last}', nn.Identity())
            self._final_norm = None
        self.num_features = self.head_hidden_size = int(backbone.dims[-1])
        self.num_classes = num_classes
        self.drop_rate = drop_rate
        official_pool = 'token' if self.tokens else 'avg'
        self.global_pool = self._check_pool(official_pool if global_pool is None else global_pool)
        self.head_drop = nn.Dropout(drop_rate)
        self.head = nn.Linear(self.num_features, num_classes) if num_classes else nn.Identity()
        self._stem = f'backbone.{family.first_conv}.weight'
        strides = backbone.stage_strides()
        self._taps = [_stage_output_module(backbone, i) for i in range(backbone.num_stages)]
        self.feature_info = [dict(num_chs=int(backbone.dims[i]), reduction=int(strides[i]),
                                  module=_module_name(backbone, m, 'backbone.'))
                             for i, m in enumerate(self._taps)]
        if not self.tokens:
            self.output_fmt = 'NCHW'

    def _check_pool(self, pool: str) -> str:
        allowed = ('token', 'avg', '') if self.tokens else ('avg', 'max', '')
        if pool not in allowed:
            raise ValueError(f'global_pool={pool!r}: choose one of {allowed}')
        return pool

    # ------------------------------------------------------------------ timm's API
    def get_classifier(self) -> nn.Module:
        return self.head

    def reset_classifier(self, num_classes: int, global_pool: Optional[str] = None):
        self.num_classes = num_classes
        if global_pool is not None:
            self.global_pool = self._check_pool(global_pool)
        self.head = nn.Linear(self.num_features, num_classes) if num_classes else nn.Identity()

    @torch.jit.ignore
    def set_grad_checkpointing(self, enable: bool = True):
        self.backbone.with_cp = enable

    @torch.jit.ignore
    def no_weight_decay(self) -> set:
        """The backbone's :meth:`~inline_mm.models.base.InLineBackbone.no_weight_decay`
        (norms, position tables, the class token, relative position biases), named from
        this model."""
        return {f'backbone.{n}' for n in self.backbone.no_weight_decay()}

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, C, H, W)`` map of the last stage after the final norm; InLine-DeiT:
        ``(B, 1 + H*W, C)`` tokens after ``norm``, class token first."""
        if not self.tokens:
            return self.backbone(x)[-1]
        b = self.backbone
        x, valid = b.prepare_input(x)
        x, hw, valid = b.embed(x, valid)
        for blk in b.blocks:
            x = run_block(blk, x, hw, blk.with_cp, valid)
        return b.norm(x)

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        if self.global_pool == 'token':
            x = x[:, 0]
        elif self.global_pool == 'avg':
            x = x[:, 1:].mean(1) if self.tokens else x.mean((2, 3))
        elif self.global_pool == 'max':
            x = x.amax((2, 3))
        x = self.head_drop(x)
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))

    def forward_intermediates(self, x: torch.Tensor,
                              indices: Optional[Union[int, Sequence[int]]] = None,
                              norm: bool = False, stop_early: bool = False,
                              output_fmt: str = 'NCHW', intermediates_only: bool = False):
        """timm's ``forward_intermediates``: the tokens leaving the last block of each
        stage in ``indices`` (InLine-DeiT: each block; its class token dropped) as
        ``NCHW`` (or ``NHWC``) maps, before any norm; ``norm=True`` passes the last
        stage's through the final norm. Returns ``(forward_features(x), maps)``, or the
        maps alone with ``intermediates_only``. (``stop_early`` is accepted; the whole
        model runs.)"""
        if output_fmt not in ('NCHW', 'NHWC'):
            raise ValueError(f"output_fmt must be 'NCHW' or 'NHWC', got {output_fmt!r}")
        take = _take_indices(len(self._taps), indices)
        seen: Dict[int, Tuple[torch.Tensor, Tuple[int, int]]] = {}
        # The blocks are called as block(x, hw, valid): the hook sees each map's size.
        hooks = [self._taps[i].register_forward_hook(
            lambda m, args, out, i=i: seen.__setitem__(i, (out, tuple(args[1]))))
            for i in take]
        try:
            final = self.forward_features(x)
        finally:
            for h in hooks:
                h.remove()
        maps = []
        last = len(self._taps) - 1
        for i in take:
            tokens, hw = seen[i]
            tokens = tokens[:, tokens.shape[1] - hw[0] * hw[1]:]      # DeiT: no class token
            if norm and i == last and self._final_norm is not None:
                tokens = getattr(self.backbone, self._final_norm)(tokens)
            fmap = to_nchw(tokens, hw)
            maps.append(fmap.permute(0, 2, 3, 1) if output_fmt == 'NHWC' else fmap)
        return maps if intermediates_only else (final, maps)

    def prune_intermediate_layers(self, indices: Union[int, Sequence[int]] = 1,
                                  prune_norm: bool = False, prune_head: bool = True):
        """timm's hook for feature extraction: drops the head (``prune_head``) and
        returns the absolute indices. The stages are kept (they are cheap to keep and
        the backbone's key names stay those of the official files)."""
        if prune_head:
            self.reset_classifier(0, '')
        return _take_indices(len(self._taps), indices)

    # ------------------------------------------------------------------ weights
    @property
    def arch_name(self) -> str:
        return self.backbone.arch_name

    def fresh_keys(self) -> List[str]:
        return []

    def convert_checkpoint(self, state: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """An official classifier's state dict (or one of this class, or of the backbone)
        -> this model's keys: the backbone's converter and checks for the body, ``head``
        kept where it fits ``num_classes``, the stem adapted to ``in_chans``."""
        plain = {k[len('backbone.'):] if k.startswith('backbone.') else k: v
                 for k, v in state.items()}
        head = {k: v for k, v in plain.items() if k.startswith('head.')}
        body = self.backbone.convert_checkpoint(
            {k: v for k, v in plain.items() if not k.startswith('head.')})
        own = self.state_dict()
        out = {f'backbone.{k}': v for k, v in body.items()}
        stem = self._stem
        if stem in out and out[stem].shape[1] != own[stem].shape[1]:
            out[stem] = adapt_input_conv(own[stem].shape[1], out[stem])
        if self.num_classes and head.get('head.weight') is not None \
                and head['head.weight'].shape == own['head.weight'].shape:
            out.update(head)
        return out


class InLineFeatures(nn.Module):
    """An InLine backbone as a timm ``features_only`` model: returns a list of NCHW
    maps (one per ``out_indices``) and describes them in ``feature_info``.

    Args:
        backbone (InLineBackbone): The backbone (``.backbone``); every stage's entry is
            its ``stage_info`` (the backbone's ``feature_info`` lists its outputs), the
            module named from this model.
    """

    def __init__(self, backbone: nn.Module):
        super().__init__()
        self.backbone = backbone
        info = [backbone.stage_info(i) for i in range(backbone.num_stages)]
        for entry in info:
            entry['module'] = f'backbone.{entry["module"]}'
        self.feature_info = FeatureInfo(info, tuple(backbone.out_indices))

    def forward(self, x: torch.Tensor) -> List[torch.Tensor]:
        return list(self.backbone(x))


class InLineIntermediates(nn.Module):
    """``features_only=True, feature_cls='getter'``: the classifier's
    :meth:`InLineClassifier.forward_intermediates` at ``out_indices`` (raw stage maps;
    ``norm=True`` passes the last through the final norm), head removed."""

    def __init__(self, model: InLineClassifier, out_indices: Sequence[int],
                 norm: bool = False, output_fmt: str = 'NCHW'):
        super().__init__()
        self.out_indices = model.prune_intermediate_layers(list(out_indices))
        self.model, self.norm, self.output_fmt = model, norm, output_fmt
        self.feature_info = FeatureInfo(model.feature_info, tuple(self.out_indices))

    def forward(self, x: torch.Tensor) -> List[torch.Tensor]:
        return self.model.forward_intermediates(x, self.out_indices, norm=self.norm,
                                                output_fmt=self.output_fmt,
                                                intermediates_only=True)
