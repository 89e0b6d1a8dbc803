"""What is particular to InLine-CSwin: outputs equal to the official code's (golden),
parameter counts, the released layout, the LePE stripe attention's padding, the
official layout (stem, merges, get_v, EMA weights). What every backbone must do:
test_backbone_contract.py."""
import pytest
import torch
from conftest import golden_args, golden_model, rel_err

from inline_mm.models import CheckpointError, InLineCSwin, convert_official
from inline_mm.models.inline_cswin import LePEStripeAttention
from support import invalid_arguments_test, param_counts_test

# The architecture of the golden case (its outputs: test_goldens.py).
TINY_GOLDEN = golden_args('inline_cswin_tiny_224')


test_param_counts = param_counts_test(
    InLineCSwin, {'tiny': (20_091_520, 20_092_416), 'small': (32_519_872, 32_520_768),
                  'base': (72_644_640, 72_645_984)},
    lambda model: sum(2 * d for d in model.dims[:-1]))   # norm3 is the official `norm`


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


test_invalid_arguments = invalid_arguments_test(InLineCSwin, [
    (dict(depths=(2, 4, 18)), 'num_heads'),
    (dict(num_heads=(3, 4, 8, 16)), 'not divisible by 3 heads'),
    (dict(num_heads=(2, 4, 7, 16), embed_dims=14), 'num_heads must be even'),
    (dict(split_sizes=(1, 2, 7, 7)), 'split_sizes'),
    (dict(split_sizes=(1, 0, 7)), 'split_sizes'),
])


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


def test_loads_every_accepted_layout(tmp_path, golden_layouts):
    paths = golden_layouts('inline_cswin_tiny_224')
    ref = golden_model('inline_cswin_tiny_224', paths['official']).state_dict()
    sd = torch.load(paths['official'], weights_only=True)['model']
    assert _to_official(convert_official(sd)[1]).keys() == {k for k in sd if 'head' not in k}
    # Official CSwin files also carry EMA weights; pick them with checkpoint_key.
    paths['ema'] = tmp_path / 'ema.pth'
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
            golden_model('inline_cswin_tiny_224', other)
    # CSwin-S into CSwin-T would fill every tensor: the depths give it away.
    deep = InLineCSwin(**{**TINY_GOLDEN, 'depths': (1, 2, 3, 1)})
    deep_path = tmp_path / 'deep.pth'
    torch.save({'model': _to_official(deep.state_dict())}, deep_path)
    with pytest.raises(CheckpointError, match=r'depths \(1, 2, 3, 1\).*has depths \(1, 2, 2, 1\)'):
        golden_model('inline_cswin_tiny_224', deep_path)
    with pytest.raises(CheckpointError, match=r'depths \(1, 2, 2, 1\).*has depths \(2, 4, 18, 1\)'):
        golden_model('inline_cswin_tiny_224', cswin_path, depths=(2, 4, 18, 1))
    wide = InLineCSwin(**{**TINY_GOLDEN, 'embed_dims': 32},
                       init_cfg=dict(type='Pretrained', checkpoint=cswin_path))
    with pytest.raises(CheckpointError, match='other shapes.*another variant'):
        wide.init_weights()
