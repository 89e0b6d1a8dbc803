"""ViTDet's simple feature pyramid: one stride-16 map to strides 4, 8, 16, 32 (and more).

Li et al., "Exploring Plain Vision Transformer Backbones for Object Detection",
ECCV 2022 (arXiv 2203.16527). mmdet 3.x ships it only in ``projects/ViTDet``, which
the pip package does not contain, and has no channel LayerNorm either; both are
registered here into mmdet's ``MODELS`` (as ``SimpleFPN`` and ``LN2d``).
"""
from collections import OrderedDict
from typing import Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.model import BaseModule

from ..registry import framework_registry

__all__ = ['SimpleFPN', 'LayerNorm2d', 'register_neck']


class LayerNorm2d(nn.Module):
    """LayerNorm over the channels of an NCHW map (ViTDet/ConvNeXt ``LayerNorm``).

    Statistics are taken in fp32 (under autocast as well) and the output is a
    contiguous NCHW tensor (mmcv's RoIAlign reads its input as dense NCHW).

    Args:
        num_features (int): Channels.
        eps (float): Added to the variance. Default: 1e-6.
    """

    def __init__(self, num_features: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(num_features))
        self.bias = nn.Parameter(torch.zeros(num_features))
        self.eps = eps

    def extra_repr(self) -> str:
        return f'{self.weight.shape[0]}, eps={self.eps}'

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        mean = xf.mean(dim=1, keepdim=True)
        var = (xf - mean).square().mean(dim=1, keepdim=True)
        y = (xf - mean) * torch.rsqrt(var + self.eps)
        y = y * self.weight.float()[:, None, None] + self.bias.float()[:, None, None]
        return y.to(x.dtype)


def _norm(cfg: Optional[dict], channels: int) -> nn.Module:
    if cfg is None:
        return nn.Identity()
    if cfg.get('type') == 'LN2d':
        return LayerNorm2d(channels, **{k: v for k, v in cfg.items()
                                        if k not in ('type', 'requires_grad')})
    from mmcv.cnn import build_norm_layer    # any other mmcv/mmdet norm
    return build_norm_layer(cfg, channels)[1]


class SimpleFPN(BaseModule):
    """Simple feature pyramid of ViTDet on one map of a plain backbone.

    Each scale of ``scales`` is made from the single input map: x4 by two stride-2
    transposed convolutions (norm and GELU between them), x2 by one, x1 as is, x0.5
    by 2x2 max pooling (odd sides rounded up). Each level then gets a 1x1 conv to
    ``out_channels`` and a 3x3 conv, each followed by ``norm_cfg`` (bias-free when
    normed). Levels beyond ``len(scales)`` come from stride-2 subsampling of the last
    one (ViTDet's ``LastLevelMaxPool``, mmdet FPN's ``add_extra_convs=False``), as the
    RPN expects.

    Args:
        in_channels (int): Channels of the backbone map (e.g. 192 for InLine-DeiT-T,
            384 for -B). Must be divisible by 4 when scale 4 is used.
        out_channels (int): Channels of every output. Default: 256.
        scales (Sequence[float]): Scale factors of the levels made from the map,
            from fine to coarse; each of 4, 2, 1, 0.5. Default: (4, 2, 1, 0.5), i.e.
            strides 4, 8, 16, 32 for a stride-16 map.
        num_outs (int): Outputs, at least ``len(scales)``. Default: 5.
        norm_cfg (dict, optional): Norm after each conv and inside the x4 upsampler;
            ``dict(type='LN2d')`` is the channel LayerNorm of ViTDet, any mmcv norm
            works; None for plain biased convs. Default: ``dict(type='LN2d', eps=1e-6)``.
        init_cfg (dict or list[dict], optional): Default: Xavier-uniform convs.

    Inputs (forward): a tensor ``(B, C, H, W)`` or the backbone's tuple of maps, of
    which the last is used.
    """

    def __init__(self, in_channels: int, out_channels: int = 256,
                 scales: Sequence[float] = (4, 2, 1, 0.5), num_outs: int = 5,
                 norm_cfg: Optional[dict] = dict(type='LN2d', eps=1e-6),
                 init_cfg: Union[dict, list, None] = dict(
                     type='Xavier', layer=['Conv2d', 'ConvTranspose2d'],
                     distribution='uniform')):
        super().__init__(init_cfg=init_cfg)
        scales = tuple(float(s) for s in scales)
        if not scales or any(s not in (4., 2., 1., .5) for s in scales):
            raise ValueError(f'scales {scales} must be non-empty, each one of 4, 2, 1, 0.5')
        if num_outs < len(scales):
            raise ValueError(f'num_outs ({num_outs}) must be >= len(scales) ({len(scales)})')
        if 4. in scales and in_channels % 4:
            raise ValueError(f'in_channels ({in_channels}) must be divisible by 4 for scale 4')
        self.in_channels, self.out_channels = in_channels, out_channels
        self.scales, self.num_outs = scales, num_outs
        c, bias = in_channels, norm_cfg is None
        self.samplers = nn.ModuleList()
        self.lateral_convs = nn.ModuleList()
        self.fpn_convs = nn.ModuleList()
        for s in scales:
            if s == 4:
                sampler = nn.Sequential(OrderedDict(
                    up1=nn.ConvTranspose2d(c, c // 2, 2, 2), norm=_norm(norm_cfg, c // 2),
                    act=nn.GELU(), up2=nn.ConvTranspose2d(c // 2, c // 4, 2, 2)))
                dim = c // 4
            elif s == 2:
                sampler, dim = nn.ConvTranspose2d(c, c // 2, 2, 2), c // 2
            elif s == 1:
                sampler, dim = nn.Identity(), c
            else:
                sampler, dim = nn.MaxPool2d(2, 2, ceil_mode=True), c   # odd maps: ceil, as padding
            self.samplers.append(sampler)
            # 'norm' in the names, so that paramwise custom_keys={'norm': ...} find them.
            self.lateral_convs.append(nn.Sequential(OrderedDict(
                conv=nn.Conv2d(dim, out_channels, 1, bias=bias),
                norm=_norm(norm_cfg, out_channels))))
            self.fpn_convs.append(nn.Sequential(OrderedDict(
                conv=nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=bias),
                norm=_norm(norm_cfg, out_channels))))

    def forward(self, inputs: Union[torch.Tensor, Sequence[torch.Tensor]]
                ) -> Tuple[torch.Tensor, ...]:
        x = inputs if isinstance(inputs, torch.Tensor) else inputs[-1]
        outs = [fpn(lateral(sampler(x))) for sampler, lateral, fpn
                in zip(self.samplers, self.lateral_convs, self.fpn_convs)]
        while len(outs) < self.num_outs:
            outs.append(F.max_pool2d(outs[-1], 1, stride=2))
        return tuple(o.contiguous() for o in outs)


def register_neck() -> bool:
    """Register ``SimpleFPN`` and ``LN2d`` in mmdet's ``MODELS`` (False: no mmdet)."""
    registry = framework_registry('mmdet')
    if registry is None:
        return False
    for cls, name in ((SimpleFPN, 'SimpleFPN'), (LayerNorm2d, 'LN2d')):
        if name not in registry.module_dict:     # a later mmdet may ship its own
            registry.register_module(name=name, module=cls)
    return True
