"""What the three InLine backbones share: output norms, freezing, weight loading."""
import re
from typing import Callable, Dict, List, Sequence, Tuple

import torch
import torch.nn as nn
from mmengine.model import BaseModule
from timm.layers import trunc_normal_

from ...checkpoint import load_pretrained

__all__ = ['InLineBackbone', 'to_nchw', 'parse_stage_types', 'check_out_indices',
           'resolve_arch']

INLINE, SOFTMAX = 'inline', 'softmax'
_TYPE_ALIASES = {'inline': INLINE, 'i': INLINE, 'softmax': SOFTMAX, 's': SOFTMAX}


def to_nchw(x: torch.Tensor, hw: Tuple[int, int]) -> torch.Tensor:
    """``(B, H*W, C)`` tokens -> contiguous ``(B, C, H, W)``."""
    # Contiguous, not the channels-last view the transpose gives: mmcv's RoIAlign
    # (CPU and CUDA) indexes its input as dense NCHW and silently reads a strided
    # map wrongly, so a Mask R-CNN on such features cannot learn its RoI heads.
    return x.transpose(1, 2).reshape(x.shape[0], x.shape[2], *hw).contiguous()


def parse_stage_types(stage_types: Sequence, depths: Sequence[int]) -> List[List[str]]:
    """Expand per-stage attention types into one ``'inline'``/``'softmax'`` per block.

    Each entry of ``stage_types`` is either one type for the whole stage
    (``'inline'`` or ``'softmax'``, short forms ``'I'``/``'S'`` accepted) or a
    sequence with one type per block of that stage (a mixed stage, e.g. InLine-Swin-B
    stage 3: ``('inline',) * 2 + ('softmax',) * 16``).
    """
    if len(stage_types) != len(depths):
        raise ValueError(f'stage_types has {len(stage_types)} entries but there are '
                         f'{len(depths)} stages (depths={tuple(depths)})')
    expanded = []
    for i, (entry, depth) in enumerate(zip(stage_types, depths)):
        per_block = [entry] * depth if isinstance(entry, str) else list(entry)
        if len(per_block) != depth:
            raise ValueError(f'stage_types[{i}] lists {len(per_block)} block types but stage {i} '
                             f'has depth {depth}')
        try:
            expanded.append([_TYPE_ALIASES[str(t).lower()] for t in per_block])
        except KeyError as e:
            raise ValueError(f'stage_types[{i}]: unknown attention type {e.args[0]!r}; use '
                             f"'inline' or 'softmax'") from None
    return expanded


def resolve_arch(name: str, presets: dict, arch: str, **overrides) -> dict:
    """The preset ``arch`` of backbone ``name`` with every non-None override applied
    (sequences become tuples)."""
    if arch not in presets:
        raise ValueError(f'unknown {name} arch {arch!r}; choose one of {sorted(presets)} or '
                         f'override {"/".join(overrides)}')
    out, custom = {}, False
    for key, value in overrides.items():
        preset = presets[arch][key]
        if value is None:
            value = preset
        elif key != 'stage_types':
            value = tuple(value) if isinstance(value, (list, tuple)) else value
            custom |= value != preset
        out[key] = value
    out['arch_name'] = 'custom' if custom else arch
    return out


def check_out_indices(out_indices: Sequence[int], num_stages: int) -> Tuple[int, ...]:
    out_indices = tuple(out_indices)
    if not out_indices or any(not 0 <= i < num_stages for i in out_indices):
        raise ValueError(f'out_indices {out_indices} must be non-empty and within '
                         f'0..{num_stages - 1}')
    return out_indices


class InLineBackbone(BaseModule):
    """Base of the InLine backbones: output norms, frozen stages, pretrained loading.

    Subclasses build ``self.stem`` (frozen with stage 0) and define
    :meth:`_stage_modules` (the modules owned by stage ``i``), ``convert_checkpoint``
    (official layout -> ours; a pure, idempotent function) and ``fresh_keys``
    (keys that a classification checkpoint cannot provide).
    """

    #: official state dict -> this backbone's; set by subclasses.
    convert_checkpoint: Callable[[Dict[str, torch.Tensor]], Dict[str, torch.Tensor]]

    def __init__(self, out_indices, frozen_stages, num_stages, init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        self.out_indices = check_out_indices(out_indices, num_stages)
        if not -1 <= frozen_stages <= num_stages:
            raise ValueError(f'frozen_stages must be in -1..{num_stages}, got {frozen_stages}')
        self.frozen_stages = frozen_stages
        self.num_stages = num_stages

    #: total stride of the last stage; smaller inputs are refused (see ``check_input``).
    min_input_size = 32

    def check_input(self, x: torch.Tensor):
        """Refuse input the backbone cannot use, saying what to do about it."""
        if x.dim() != 4:
            raise ValueError(f'{type(self).__name__} expects a (B, C, H, W) batch, got shape '
                             f'{tuple(x.shape)}')
        if x.shape[1] != getattr(self, 'in_channels', x.shape[1]):
            raise ValueError(f'{type(self).__name__} was built for {self.in_channels}-channel '
                             f'input but got {x.shape[1]} channels: convert grayscale/RGBA images '
                             "to RGB (LoadImageFromFile(color_type='color') does) or set "
                             'in_channels')
        h, w = x.shape[-2:]
        if min(h, w) < self.min_input_size:
            raise ValueError(f'input of {h}x{w} pixels is smaller than the backbone\'s total '
                             f'stride ({self.min_input_size}); resize or pad images to at least '
                             f'{self.min_input_size} px per side (e.g. a Resize or Pad transform)')

    def _add_output_norms(self, dims: Sequence[int], eps: float = 1e-5):
        for i in self.out_indices:
            self.add_module(f'norm{i}', nn.LayerNorm(dims[i], eps=eps))

    #: whether the official model's final ``norm`` initialises the last output norm
    #: (InLine-Swin, InLine-CSwin); InLine-PVT has none, so all its output norms start fresh.
    official_final_norm = True

    def _stage_list(self) -> nn.ModuleList:
        """The stages, each with a ``with_cp`` attribute (``self.stages`` by default)."""
        return self.stages

    def _stage_modules(self, i: int) -> List[nn.Module]:
        return [self._stage_list()[i]]

    def _stem_modules(self) -> List[nn.Module]:
        raise NotImplementedError

    @property
    def with_cp(self) -> bool:
        return self._with_cp

    @with_cp.setter
    def with_cp(self, value: bool):
        self._with_cp = bool(value)
        for stage in self._stage_list():
            stage.with_cp = self._with_cp

    def fresh_keys(self) -> List[str]:
        """State-dict keys a classification checkpoint does not provide: the output
        norms, except the last one where the official final norm initialises it."""
        keep = f'norm{self.num_stages - 1}.' if self.official_final_norm else None
        return [k for k in self.state_dict()
                if re.match(r'norm\d+\.', k) and not (keep and k.startswith(keep))]

    # ------------------------------------------------------------------ freezing
    def _freeze_stages(self):
        if self.frozen_stages < 0:
            return
        frozen = list(self._stem_modules())
        for i in range(self.frozen_stages):
            frozen += self._stage_modules(i)
            if i in self.out_indices:
                frozen.append(getattr(self, f'norm{i}'))
        for m in frozen:
            m.eval()
            for p in m.parameters():
                p.requires_grad = False

    def train(self, mode: bool = True):
        super().train(mode)
        self._freeze_stages()
        return self

    # ------------------------------------------------------------------ weights
    def _init_default(self, m: nn.Module):
        if isinstance(m, nn.Linear):
            trunc_normal_(m.weight, std=.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)

    def init_weights(self):
        cfg = self.init_cfg
        if isinstance(cfg, dict) and cfg.get('type') == 'Pretrained':
            options = {k: v for k, v in cfg.items() if k != 'type'}
            load_pretrained(self, **options)
            self._is_init = True
            return
        if cfg is not None:
            return super().init_weights()
        self.apply(self._init_default)
        self._init_extra()
        self._is_init = True

    def _init_extra(self):
        """Initialisation beyond Linear/LayerNorm defaults (subclasses)."""
