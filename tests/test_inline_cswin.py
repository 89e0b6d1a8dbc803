import pytest
import torch
from conftest import build_in_each_framework, rel_err

from inline_mm.models import CheckpointError, convert_official, save_converted
from inline_mm.models import InLineCSwin
from inline_mm.models.inline_cswin import LePEStripeAttention

# The architecture of the golden case (cases.json: inline_cswin_tiny_224).
TINY_GOLDEN = dict(embed_dims=16, depths=(1, 2, 2, 1), num_heads=(2, 4, 8, 16))
# Small enough for CPU tests, with stripe blocks in stages 1-3 (split 2 and 7 pad
# at odd sizes) and an InLine block in front of a softmax one in stage 1.
SMALL = dict(embed_dims=16, depths=(1, 2, 2, 1), num_heads=(2, 2, 4, 8), drop_path_rate=0.,
             stage_types=('inline', ('inline', 'softmax'), 'softmax', 'softmax'))


def stage_taps(model, x):
    """Tokens leaving each stage's last block (before the output norm)."""
    taps = {}
    hooks = [stage.register_forward_hook(lambda m, i, o, k=k: taps.__setitem__(k, o[0]))
             for k, stage in enumerate(model.stages)]
    with torch.no_grad():
        outs = model(x)
    for h in hooks:
        h.remove()
    return taps, outs


def load_golden_model(path, **kw):
    model = InLineCSwin(**{**TINY_GOLDEN, **kw}, drop_path_rate=0.,
                        init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    model.init_weights()
    return model.eval()


def test_golden_224(golden):
    path, exp = golden('inline_cswin_tiny_224')
    model = load_golden_model(path)
    taps, outs = stage_taps(model, exp['input'])
    for i in range(4):
        assert rel_err(taps[i], exp[f'stage{i}']) <= 1e-5, i
    assert rel_err(outs[3].flatten(2).transpose(1, 2), exp['final_norm']) <= 1e-5


@pytest.mark.parametrize('arch,official_without_head', [
    ('tiny', 20_091_520), ('small', 32_519_872), ('base', 72_644_640)])
def test_param_counts(arch, official_without_head):
    with torch.device('meta'):
        model = InLineCSwin(arch=arch)
    extra_output_norms = sum(2 * d for d in model.dims[:-1])   # norm3 is the official `norm`
    expected = {'tiny': 20_092_416, 'small': 32_520_768, 'base': 72_645_984}[arch]
    assert official_without_head + extra_output_norms == expected
    assert sum(p.numel() for p in model.parameters()) == expected
    assert model.arch_name == arch


def test_released_layout():
    with torch.device('meta'):
        model = InLineCSwin(arch='tiny')
    assert [len(s.blocks) for s in model.stages] == [2, 4, 18, 1]
    for i, stage in enumerate(model.stages):
        for blk in stage.blocks:
            assert blk.attn_type == ('inline' if i < 2 else 'softmax')
            if i < 2:
                assert blk.attns[0].lepe is not None           # InLine + LePE, one branch
            else:
                assert [a.direction for a in blk.attns] == (
                    ['vertical', 'horizontal'] if i < 3 else ['global'])
    assert model.stages[2].blocks[0].attns[0].split_size == 7


@pytest.mark.parametrize('size', [(224, 224), (255, 255), (112, 137), (800, 1216), (32, 33)])
def test_shapes(size):
    model = InLineCSwin(**SMALL).eval()
    h, w = size
    with torch.no_grad():
        outs = model(torch.randn(1, 3, h, w))
    for i, o in enumerate(outs):
        s = 4 * 2 ** i
        assert o.shape == (1, 16 * 2 ** i, -(-h // s), -(-w // s))
        assert torch.isfinite(o).all()


def test_batch_independent():
    model = InLineCSwin(**SMALL).eval()
    x = torch.randn(3, 3, 100, 116)
    with torch.no_grad():
        together = model(x)
        alone = [model(x[i:i + 1]) for i in range(3)]
    for i, o in enumerate(together):
        for b in range(3):
            assert torch.allclose(o[b], alone[b][i][0], atol=1e-5, rtol=1e-4)


def _naive_stripes(attn, qkv, hw):
    """Softmax + LePE inside each stripe cut from the real map (no padding), loops."""
    b, n, _, c = qkv.shape
    h, w = hw
    heads, d = attn.num_heads, c // attn.num_heads
    sh, sw = attn.stripe(hw)
    img = qkv.view(b, h, w, 3, c)
    out = torch.zeros(b, h, w, c)
    for r in range(0, h, sh):
        for s in range(0, w, sw):
            part = img[:, r:r + sh, s:s + sw]                            # ragged at the ends
            ph, pw = part.shape[1:3]
            q, k, v = (part[..., j, :].reshape(b, ph * pw, heads, d).transpose(1, 2)
                       for j in range(3))
            a = (q * d ** -0.5 @ k.transpose(-2, -1)).softmax(-1)
            lepe = attn.lepe(part[..., 2, :].permute(0, 3, 1, 2))       # zero pad at the cut
            o = (a @ v).transpose(1, 2).reshape(b, ph, pw, c) + lepe.permute(0, 2, 3, 1)
            out[:, r:r + sh, s:s + sw] = o
    return out.reshape(b, n, c)


@pytest.mark.parametrize('direction,split,hw', [
    ('vertical', 2, (9, 11)), ('horizontal', 2, (9, 11)), ('vertical', 7, (10, 16)),
    ('horizontal', 7, (4, 10)), ('global', 7, (5, 8))])
def test_stripes_pad_without_changing_real_tokens(direction, split, hw):
    torch.manual_seed(4)
    attn = LePEStripeAttention(16, 2, direction, split).eval()
    qkv = torch.randn(2, hw[0] * hw[1], 3, 16)
    with torch.no_grad():
        assert rel_err(attn.attend(qkv.flatten(2), hw), _naive_stripes(attn, qkv, hw)) < 1e-5


def test_output_indices_and_norms():
    model = InLineCSwin(**SMALL, out_indices=(0, 2)).eval()
    outs = model(torch.randn(1, 3, 64, 64))
    assert [o.shape[1] for o in outs] == [16, 64]
    assert hasattr(model, 'norm0') and hasattr(model, 'norm2') and not hasattr(model, 'norm3')


def test_frozen_stages():
    model = InLineCSwin(**SMALL, frozen_stages=2)
    model.train()
    for m in (model.stem, model.stages[0], model.stages[1], model.norm0, model.norm1):
        assert not m.training
        assert all(not p.requires_grad for p in m.parameters())
    for m in (model.stages[2], model.stages[3], model.norm2, model.norm3):
        assert m.training
        assert all(p.requires_grad for p in m.parameters())
    model.train()          # re-applied on every train()
    assert not model.stages[1].training
    stem_only = InLineCSwin(**SMALL, frozen_stages=0).train()
    assert not stem_only.stem.training and stem_only.stages[0].training


def test_with_cp_same_outputs_and_grads():
    ref = InLineCSwin(**SMALL)
    cpm = InLineCSwin(**SMALL, with_cp=True)
    cpm.load_state_dict(ref.state_dict())
    x = torch.randn(2, 3, 70, 90)
    outs = [m(x) for m in (ref, cpm)]
    for a, b in zip(*outs):
        assert torch.equal(a, b)
    for o in outs:
        sum(t.square().mean() for t in o).backward()
    for (n, p), (_, q) in zip(ref.named_parameters(), cpm.named_parameters()):
        assert torch.allclose(p.grad, q.grad, rtol=1e-5, atol=1e-7), n


@pytest.mark.parametrize('kwargs,message', [
    (dict(arch='huge'), 'unknown InLineCSwin arch'),
    (dict(depths=(2, 4, 18)), 'num_heads'),
    (dict(num_heads=(3, 4, 8, 16)), 'not divisible by 3 heads'),
    (dict(num_heads=(2, 4, 7, 16), embed_dims=14), 'num_heads must be even'),
    (dict(split_sizes=(1, 2, 7, 7)), 'split_sizes'),
    (dict(split_sizes=(1, 0, 7)), 'split_sizes'),
    (dict(stage_types=('inline', 'inline', 'stripe', 'softmax')),
     "unknown attention type 'stripe'"),
    (dict(out_indices=()), 'out_indices'),
    (dict(frozen_stages=-2), 'frozen_stages'),
])
def test_invalid_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        InLineCSwin(**kwargs)


@pytest.mark.parametrize('shape,message', [
    ((1, 3, 64, 20), 'smaller than the backbone'),
    ((3, 64, 64), r'\(B, C, H, W\)'),
])
def test_bad_input_is_explained(shape, message):
    with pytest.raises(ValueError, match=message):
        InLineCSwin(**SMALL)(torch.randn(*shape))


def test_bf16_autocast_close_to_fp32():
    model = InLineCSwin(**SMALL).eval()
    x = torch.randn(1, 3, 96, 128) * 100
    with torch.no_grad():
        ref = model(x)
        with torch.autocast('cpu', dtype=torch.bfloat16):
            low = model(x)
    for a, b in zip(low, ref):
        assert torch.isfinite(a).all()
        assert rel_err(a, b) <= 2e-2


def test_conversion(golden):
    path, _ = golden('inline_cswin_tiny_224')
    sd = torch.load(path, weights_only=True)['model']
    once = InLineCSwin(**TINY_GOLDEN).convert_checkpoint(sd)
    assert torch.equal(once['norm3.weight'], sd['norm.weight'])
    assert torch.equal(once['stem.conv.weight'], sd['stage1_conv_embed.0.weight'])
    assert torch.equal(once['stages.1.merge.conv.weight'], sd['merge1.conv.weight'])
    assert torch.equal(once['stages.2.blocks.1.attns.1.lepe.weight'],
                       sd['stage3.1.attns.1.get_v.weight'])
    assert not any(k.startswith('head.') or 'get_v' in k for k in once)
    assert convert_official(sd)[0] == 'InLineCSwin'
    twice = InLineCSwin(**TINY_GOLDEN).convert_checkpoint(once)
    assert once.keys() == twice.keys()


def _to_official(state):
    """Our keys -> the official layout (inverse of the converter)."""
    out = {}
    for k, v in state.items():
        if k.startswith(('norm0', 'norm1', 'norm2')):
            continue
        parts = k.split('.')
        if k.startswith('norm3.'):
            k = 'norm.' + parts[1]
        elif k.startswith('stem.'):
            k = 'stage1_conv_embed.' + {'conv': '0', 'norm': '2'}[parts[1]] + '.' + parts[2]
        elif parts[2] == 'merge':
            k = f'merge{parts[1]}.' + '.'.join(parts[3:])
        else:
            k = f'stage{int(parts[1]) + 1}.' + '.'.join(parts[3:])
        out[k.replace('.lepe.', '.get_v.')] = v
    return out


def test_loads_every_accepted_layout(tmp_path, golden):
    path, _ = golden('inline_cswin_tiny_224')
    ref = load_golden_model(path).state_dict()
    sd = torch.load(path, weights_only=True)['model']
    assert _to_official(convert_official(sd)[1]).keys() == {k for k in sd if 'head' not in k}
    mm = {'meta': {}, 'state_dict': {f'backbone.{k}': v for k, v in sd.items()}}
    mm['state_dict']['neck.fpn.weight'] = torch.zeros(3)
    paths = {'official': path, 'plain': tmp_path / 'plain.pth', 'mm': tmp_path / 'mm.pth',
             'converted': tmp_path / 'converted.safetensors', 'ema': tmp_path / 'ema.pth'}
    torch.save(sd, paths['plain'])
    torch.save(mm, paths['mm'])
    save_converted(convert_official(sd)[1], str(paths['converted']))
    # Official CSwin files also carry EMA weights; pick them with checkpoint_key.
    torch.save({'model': {k: v + 1 for k, v in sd.items()}, 'state_dict_ema': sd}, paths['ema'])
    for name, p in paths.items():
        model = InLineCSwin(**TINY_GOLDEN, init_cfg=dict(
            type='Pretrained', checkpoint=str(p),
            checkpoint_key='state_dict_ema' if name == 'ema' else None))
        model.init_weights()
        got = model.state_dict()
        for k, v in ref.items():
            if not k.startswith(('norm0', 'norm1', 'norm2')):    # fresh output norms
                assert torch.equal(got[k], v), (name, k)


def test_wrong_variant_checkpoints_are_refused(tmp_path, golden):
    cswin_path, _ = golden('inline_cswin_tiny_224')
    pvt_path, _ = golden('inline_pvt_tiny_224')
    swin_path, _ = golden('inline_swin_tiny_224')
    for other, family in ((pvt_path, 'InLinePVT'), (swin_path, 'InLineSwin')):
        with pytest.raises(CheckpointError, match=f'checkpoint of {family}, not of InLineCSwin'):
            load_golden_model(other)
    # CSwin-S into CSwin-T would fill every tensor: the depths give it away.
    deep = InLineCSwin(**{**TINY_GOLDEN, 'depths': (1, 2, 3, 1)})
    deep_path = tmp_path / 'deep.pth'
    torch.save({'model': _to_official(deep.state_dict())}, deep_path)
    with pytest.raises(CheckpointError, match=r'depths \(1, 2, 3, 1\).*has depths \(1, 2, 2, 1\)'):
        load_golden_model(deep_path)
    with pytest.raises(CheckpointError, match=r'depths \(1, 2, 2, 1\).*has depths \(2, 4, 18, 1\)'):
        load_golden_model(cswin_path, depths=(2, 4, 18, 1))
    wide = InLineCSwin(**{**TINY_GOLDEN, 'embed_dims': 32},
                       init_cfg=dict(type='Pretrained', checkpoint=cswin_path))
    with pytest.raises(CheckpointError, match='other shapes.*another variant'):
        wide.init_weights()


def test_missing_checkpoint_names_the_path(tmp_path):
    model = InLineCSwin(**SMALL, init_cfg=dict(type='Pretrained',
                                               checkpoint=str(tmp_path / 'nope.pth')))
    with pytest.raises(FileNotFoundError, match='nope.pth'):
        model.init_weights()


def test_registered_in_both_frameworks():
    for model in build_in_each_framework(dict(type='InLineCSwin', **SMALL)):
        assert isinstance(model, InLineCSwin)