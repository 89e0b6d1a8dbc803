"""InLine-DeiT: goldens of the official code, parameter counts, the class-token attention
against a plain transcription of the official formula, position resizing, loading the
official layout. What every backbone must do (shapes, frozen stages, with_cp, autocast,
argument and input checks, converted layouts, refusals, registration) is tested over the
family table in tests/test_backbone_contract.py."""
import pytest
import torch
import torch.nn.functional as F
from conftest import golden_args, golden_model, golden_run, rel_err
from support import invalid_arguments_test, stir

from inline_mm.models import CheckpointError, InLinePVT, InLineSwin, convert_official
from inline_mm.models.inline_deit import (InLineAttentionWithClsToken, InLineDeiT,
                                          resize_pos_embed)

# The architecture of the golden cases (their outputs: test_goldens.py).
TINY_GOLDEN = golden_args('inline_deit_tiny_224')
SMALL = dict(embed_dims=32, depth=3, num_heads=2, pretrain_img_size=64, mlp_ratio=2.,
             drop_path_rate=0., out_indices=(0, 2))


@pytest.mark.parametrize('case', ['inline_deit_tiny_224', 'inline_deit_tiny_448'])
def test_golden_outputs_are_patch_tokens_and_the_table_keeps_its_grid(case):
    model, _, taps, outs = golden_run(case)
    # Outputs are the patch tokens as maps (the class token dropped)...
    assert torch.equal(outs[0].flatten(2).transpose(1, 2), taps['block0'][:, 1:])
    # ... and the table keeps its 14x14 training grid: 448 resizes per forward only.
    assert model.pos_embed.shape == (1, 1 + 14 * 14, 48)


@pytest.mark.parametrize('arch,official_without_head', [
    ('tiny', 6_284_736), ('small', 16_413_760), ('base', 23_412_096)])
def test_param_counts(arch, official_without_head):
    with torch.device('meta'):
        model = InLineDeiT(arch=arch)
    assert sum(p.numel() for p in model.parameters()) == official_without_head
    assert model.arch_name == arch
    grid = {'tiny': 14, 'small': 18, 'base': 28}[arch]
    assert model.pos_embed.shape[1] == 1 + grid * grid


def test_base_is_384_wide():
    with torch.device('meta'):
        model = InLineDeiT(arch='base')
    assert model.embed_dims == 384 and model.blocks[0].attn.num_heads == 12
    assert model.blocks[0].norm1.eps == model.norm.eps == 1e-6


def reference_cls_attention(attn, x, hw):
    """The official ``InLineAttention.forward`` of ``inline_deit.py``, term by term, for
    an ``H x W`` map that need not be square."""
    b, n, c = x.shape
    heads, (h, w) = attn.num_heads, hw
    d = c // heads
    s = d ** -0.5
    q, k, v = attn.qkv(x).reshape(b, n, 3, heads, d).permute(2, 0, 3, 1, 4)
    kernels = attn.residual(x.mean(dim=1).unsqueeze(-1)).reshape(b * c, 1, 3, 3)
    kv = (k.transpose(-2, -1) * (s / n) ** 0.5) @ (v * (s / n) ** 0.5)
    out = q @ kv + (1 - q @ k.mean(dim=2, keepdim=True).transpose(-2, -1) * s) \
        * v.mean(dim=2, keepdim=True)
    out = out.transpose(1, 2).reshape(b, n, c)
    v_img = v[:, :, 1:].transpose(1, 2).reshape(b, h, w, c).permute(0, 3, 1, 2)
    local = F.conv2d(v_img.reshape(1, b * c, h, w), kernels, padding=1, groups=b * c)
    out = torch.cat([out[:, :1], out[:, 1:] + local.reshape(b, c, h * w).transpose(1, 2)], 1)
    return attn.proj(out)


@pytest.mark.parametrize('impl', ['kernel', 'plain'])
@pytest.mark.parametrize('b,h,w,c,heads', [(2, 7, 11, 48, 3), (1, 1, 5, 32, 2), (3, 4, 4, 16, 1)])
def test_cls_attention_matches_official_formula(b, h, w, c, heads, impl):
    attn = stir(InLineAttentionWithClsToken(c, heads, impl=impl))
    x = torch.randn(b, 1 + h * w, c, requires_grad=True)
    ours, ref = attn(x, (h, w)), reference_cls_attention(attn, x, (h, w))
    assert rel_err(ours, ref) <= 1e-5
    grad = torch.randn_like(ours)
    params = [x] + list(attn.parameters())
    g_ours = torch.autograd.grad(ours, params, grad)
    g_ref = torch.autograd.grad(ref, params, grad)
    for i, (a, r) in enumerate(zip(g_ours, g_ref)):
        assert rel_err(a, r) <= 1e-5, i


def test_cls_attention_rejects_wrong_token_count():
    attn = InLineAttentionWithClsToken(16, 2)
    with pytest.raises(ValueError, match='not 1 prefix token'):
        attn(torch.randn(1, 16, 16), (4, 4))


def test_position_table_resize_is_the_official_one():
    torch.manual_seed(1)
    table = torch.randn(1, 1 + 4 * 4, 3)
    assert resize_pos_embed(table, (4, 4), (4, 4)) is table
    out = resize_pos_embed(table, (4, 4), (2, 8))          # same area, other shape
    assert torch.equal(out[:, :1], table[:, :1])
    grid = table[:, 1:].reshape(1, 4, 4, 3).permute(0, 3, 1, 2)
    expected = F.interpolate(grid, size=(2, 8), mode='bilinear', align_corners=False)
    assert torch.allclose(out[:, 1:], expected.flatten(2).transpose(1, 2))


@pytest.mark.parametrize('size', [(64, 64), (255, 255), (112, 137), (16, 16), (16, 40),
                                  (17, 33)])
def test_shapes(size):
    model = InLineDeiT(**SMALL).eval()
    h, w = size
    with torch.no_grad():
        outs = model(torch.randn(1, 3, h, w))
    assert len(outs) == 2
    for o in outs:
        assert o.shape == (1, 32, -(-h // 16), -(-w // 16))
        assert o.is_contiguous() and torch.isfinite(o).all()


def test_out_indices_order_and_final_norm():
    model = InLineDeiT(**{**SMALL, 'out_indices': (2, 0)}).eval()
    x = torch.randn(1, 3, 48, 64)
    with torch.no_grad():
        a, b = model(x)
        ref = InLineDeiT(**{**SMALL, 'out_indices': (0, 1, 2)}).eval()
        ref.load_state_dict(model.state_dict())
        r = ref(x)
    assert torch.equal(a, r[2]) and torch.equal(b, r[0])
    plain = InLineDeiT(**{**SMALL, 'final_norm': False}).eval()
    assert not hasattr(plain, 'norm')
    assert sum(p.numel() for p in model.parameters()) - \
        sum(p.numel() for p in plain.parameters()) == 2 * 32


def test_only_needed_blocks_run():
    model = InLineDeiT(**{**SMALL, 'out_indices': (0,)}).eval()
    calls = []
    for i, blk in enumerate(model.blocks):
        blk.register_forward_hook(lambda m, a, o, i=i: calls.append(i))
    model(torch.randn(1, 3, 32, 32))
    assert calls == [0]


def test_frozen_stages():
    model = InLineDeiT(**SMALL, frozen_stages=2)
    model.train()
    for m in (model.patch_embed, model.blocks[0], model.blocks[1]):
        assert not m.training
        assert all(not p.requires_grad for p in m.parameters())
    assert not model.cls_token.requires_grad and not model.pos_embed.requires_grad
    assert model.blocks[2].training and all(p.requires_grad for p in model.blocks[2].parameters())
    assert model.norm.weight.requires_grad
    model.train()
    assert not model.blocks[1].training
    stem_only = InLineDeiT(**SMALL, frozen_stages=0).train()
    assert not stem_only.pos_embed.requires_grad and stem_only.blocks[0].training
    everything = InLineDeiT(**SMALL, frozen_stages=3).train()
    assert not any(p.requires_grad for p in everything.parameters())


test_invalid_arguments = invalid_arguments_test(InLineDeiT, [
    (dict(num_heads=5), 'not divisible by 5 heads'),
    (dict(depth=0), 'depth must be >= 1'),
    (dict(out_indices=(12,)), 'out_indices'),
    (dict(pretrain_img_size=8), 'at least one patch'),
])


def test_converter_drops_the_head_and_is_idempotent(golden):
    path, _ = golden('inline_deit_tiny_224')
    sd = torch.load(path, weights_only=True)['model']
    model = InLineDeiT(**TINY_GOLDEN)
    once = model.convert_checkpoint(sd)
    assert set(sd) - set(once) == {'head.weight', 'head.bias'}
    assert set(once) == set(model.state_dict())
    assert convert_official(sd)[0] == 'InLineDeiT'
    twice = model.convert_checkpoint(once)
    assert once.keys() == twice.keys() and all(torch.equal(once[k], twice[k]) for k in once)


def test_loads_every_accepted_layout(golden_layouts):
    paths = golden_layouts('inline_deit_tiny_224')
    path = paths['official']
    ref = golden_model('inline_deit_tiny_224', path).state_dict()
    for name, p in paths.items():
        got = golden_model('inline_deit_tiny_224', p).state_dict()
        assert got.keys() == ref.keys()
        assert all(torch.equal(got[k], v) for k, v in ref.items()), name
    # Without the final norm, the released norm is reported as ignored, not an error.
    plain = golden_model('inline_deit_tiny_224', path, final_norm=False)
    assert not hasattr(plain, 'norm')


def test_wrong_variant_and_family_checkpoints_are_refused(tmp_path, golden):
    deit_path, _ = golden('inline_deit_tiny_224')
    swin_path, _ = golden('inline_swin_tiny_224')
    with pytest.raises(CheckpointError, match='checkpoint of InLineSwin, not of InLineDeiT'):
        golden_model('inline_deit_tiny_224', swin_path)
    # ... and the other families refuse an InLine-DeiT file.
    for cls, kw in ((InLineSwin, dict(embed_dims=16, depths=(2, 2, 2, 2),
                                      num_heads=(1, 2, 4, 8))),
                    (InLinePVT, dict(embed_dims=(16, 32, 80, 128), depths=(1, 1, 1, 1),
                                     num_heads=(1, 2, 5, 8)))):
        other = cls(**kw, init_cfg=dict(type='Pretrained', checkpoint=deit_path))
        message = f'checkpoint of InLineDeiT, not of {cls.__name__}'
        with pytest.raises(CheckpointError, match=message):
            other.init_weights()
    with pytest.raises(CheckpointError,
                       match=r'depths \(4,\).*has depths \(6,\): it is another variant'):
        golden_model('inline_deit_tiny_224', deit_path, depth=6)
    deeper = InLineDeiT(**{**TINY_GOLDEN, 'depth': 6})
    deeper_path = tmp_path / 'deeper.pth'
    torch.save({'model': deeper.state_dict()}, deeper_path)
    with pytest.raises(CheckpointError, match=r'depths \(6,\).*has depths \(4,\)'):
        golden_model('inline_deit_tiny_224', deeper_path)
    with pytest.raises(CheckpointError, match='other shapes.*another variant'):
        golden_model('inline_deit_tiny_224', deit_path, embed_dims=96)
    # A table of another training grid (T's 14x14 in a model stored at 18x18, as -S).
    with pytest.raises(CheckpointError, match=r'14x14 grid \(pretrain_img_size=224\).*18x18'):
        golden_model('inline_deit_tiny_224', deit_path, pretrain_img_size=288)


def test_default_init_is_finite_and_random():
    model = InLineDeiT(**SMALL)
    model.init_weights()
    assert model.pos_embed.std() > 0 and model.cls_token.std() > 0
    assert torch.isfinite(torch.cat([p.flatten() for p in model.parameters()])).all()


def test_flops_count_every_product_of_the_attention():
    """The dispatcher-level counter (tools/analysis_tools/get_flops.py) counts the plain
    form: the linear attention's products and the batched local convolution; at 224 the
    backbone is exactly its analytic MAC count (the paper's 1.1 G for InLine-DeiT-T)."""
    from inline_mm.analysis.complexity import count_macs
    model = InLineDeiT(arch='tiny', out_indices=(11,)).eval()
    c, heads, hw = 192, 6, 14 * 14
    n, d = 1 + hw, c // heads
    per_block = (12 * n * c * c              # qkv 3C^2, proj C^2, MLP 8C^2 per token
                 + 2 * heads * n * d * d     # K^T V and Q (K^T V)
                 + heads * d * d             # mean(K)^T mean(V)
                 + 9 * hw * c                # predicted depthwise 3x3 on the patch map
                 + 10 * c * d                # the kernel predictor's two grouped 1x1 convs
                 + n * c)                    # the token mean (per-token weights: the plain
    #                                          form masks whatever the images' sizes are)
    expected = 12 * per_block + hw * c * 3 * 16 * 16
    _, cx = count_macs(model, lambda: model(torch.randn(1, 3, 224, 224)))
    assert cx.macs == expected
    assert round(cx.macs / 1e9, 1) == 1.1
    assert cx.by_op['aten.convolution'] >= 12 * 9 * hw * c
