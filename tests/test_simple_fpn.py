"""SimpleFPN (ViTDet's simple feature pyramid) and its channel LayerNorm, registered in mmdet."""
import pytest
import torch
import torch.nn.functional as F
from conftest import rel_err

from inline_mm.models.detection import LayerNorm2d, SimpleFPN


def test_layer_norm_2d_is_layer_norm_over_channels():
    ln = LayerNorm2d(8, eps=1e-6)
    with torch.no_grad():
        ln.weight.normal_()
        ln.bias.normal_()
    x = torch.randn(2, 8, 5, 7) * 3 + 1
    ref = F.layer_norm(x.permute(0, 2, 3, 1), (8,), ln.weight, ln.bias, 1e-6).permute(0, 3, 1, 2)
    out = ln(x)
    assert rel_err(out, ref) < 1e-5 and out.is_contiguous()
    with torch.autocast('cpu', dtype=torch.bfloat16):
        low = ln(x.bfloat16())
    assert low.dtype == torch.bfloat16 and rel_err(low, ref) < 2e-2


@pytest.mark.parametrize('hw', [(8, 10), (7, 9), (1, 1)])
def test_pyramid_shapes(hw):
    neck = SimpleFPN(32, 16).eval()
    x = torch.randn(2, 32, *hw)
    with torch.no_grad():
        outs = neck((torch.randn(2, 32, 3, 3), x))        # a backbone tuple: the last map
    h, w = hw
    expected = [(4 * h, 4 * w), (2 * h, 2 * w), (h, w), (-(-h // 2), -(-w // 2))]
    expected.append(((expected[-1][0] - 1) // 2 + 1, (expected[-1][1] - 1) // 2 + 1))
    assert [tuple(o.shape[-2:]) for o in outs] == expected
    assert all(o.shape[:2] == (2, 16) and o.is_contiguous() for o in outs)
    assert torch.equal(neck(x)[2], outs[2])


def test_layout_and_no_norm_variant():
    neck = SimpleFPN(64, 8, norm_cfg=None)
    names = [n for n, _ in neck.named_parameters()]
    assert not any('norm' in n for n in names)
    assert all(m.bias is not None for m in neck.modules() if isinstance(m, torch.nn.Conv2d))
    normed = SimpleFPN(64, 8)
    norms = [n for n, m in normed.named_modules() if isinstance(m, LayerNorm2d)]
    # one in the x4 upsampler, one after every lateral and output conv; all named 'norm'
    assert len(norms) == 1 + 2 * 4 and all(n.endswith('norm') for n in norms)
    assert all(m.bias is None for m in normed.modules() if isinstance(m, torch.nn.Conv2d))
    only_two = SimpleFPN(64, 8, scales=(1, 0.5), num_outs=3)
    assert len(only_two(torch.randn(1, 64, 4, 4))) == 3


@pytest.mark.parametrize('kwargs,message', [
    (dict(in_channels=30), 'divisible by 4'),
    (dict(scales=(8, 1)), 'each one of 4, 2, 1, 0.5'),
    (dict(num_outs=3), 'num_outs'),
])
def test_invalid_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SimpleFPN(**{'in_channels': 32, **kwargs})


def test_built_from_mmdet_registry_with_mmcv_norm():
    from mmdet.registry import MODELS
    from mmengine.registry import DefaultScope
    with DefaultScope.overwrite_default_scope('mmdet'):
        neck = MODELS.build(dict(type='SimpleFPN', in_channels=16, out_channels=8,
                                 norm_cfg=dict(type='GN', num_groups=2)))
        ln = MODELS.build(dict(type='LN2d', num_features=4))
        from mmcv.cnn import build_norm_layer
        _, via_mmcv = build_norm_layer(dict(type='LN2d'), 4)     # usable in heads' norm_cfg
    assert isinstance(neck, SimpleFPN) and isinstance(ln, LayerNorm2d)
    assert isinstance(via_mmcv, LayerNorm2d)
    assert isinstance(neck.lateral_convs[0].norm, torch.nn.GroupNorm)
    neck.init_weights()
    assert len(neck(torch.randn(1, 16, 4, 4))) == 5
