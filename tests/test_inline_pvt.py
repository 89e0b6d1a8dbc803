"""What is particular to InLine-PVT: outputs equal to the official code's (goldens, one
non-square), the position tables resized per forward, parameter counts, the optional
spatial-reduction attention, the official layout (q/kv merged into qkv). What every
backbone must do: test_backbone_contract.py."""
import pytest
import torch
import torch.nn.functional as F
from conftest import golden_args, golden_model, golden_run, rel_err

from inline_mm.models import CheckpointError, InLinePVT, convert_official
from inline_mm.models.inline_pvt import PositionEmbedding, SpatialReductionAttention
from support import invalid_arguments_test, param_counts_test

# The architecture of the golden cases (their outputs: test_goldens.py).
TINY_GOLDEN = golden_args('inline_pvt_tiny_224')
# Small enough for CPU tests, with the optional spatial-reduction softmax blocks
# (sr 8 in stage 0 needs the 32-pixel minimum input exactly, sr 1 in stage 3).
SMALL = dict(embed_dims=(16, 32, 48, 64), depths=(1, 2, 2, 1), num_heads=(1, 2, 3, 4),
             mlp_ratios=(2, 2, 2, 2), drop_path_rate=0.,
             stage_types=(('softmax',), 'inline', ('inline', 'softmax'), 'softmax'))


@pytest.mark.parametrize('case', ['inline_pvt_tiny_224', 'inline_pvt_tiny_320x480'])
def test_loaded_tables_keep_their_grid(case):
    """The golden run at 320x480 resizes the 224 tables per forward only."""
    model, *_ = golden_run(case)
    assert model.stages[0].pos_embed.weight.shape == (1, 56 * 56, 16)


def test_position_table_is_resized_whenever_the_grid_differs():
    """Same area, other shape (4x4 vs 2x8): still resized, never reused as is."""
    pe = PositionEmbedding(3, (4, 4))
    x = torch.zeros(1, 16, 3)
    assert torch.equal(pe(x, (4, 4)), pe.weight)
    table = pe.weight.detach().reshape(1, 4, 4, 3).permute(0, 3, 1, 2)
    expected = F.interpolate(table, size=(2, 8), mode='bilinear', align_corners=False)
    assert torch.allclose(pe(x, (2, 8)), expected.flatten(2).transpose(1, 2))


test_param_counts = param_counts_test(
    InLinePVT, {'tiny': (11_519_232, 11_521_280), 'small': (21_043_136, 21_045_184),
                'medium': (37_105_856, 37_107_904), 'large': (50_641_280, 50_643_328)},
    lambda model: 2 * sum(model.dims))   # norm0..3, all added (no official final norm)


def test_released_layout_is_all_inline_without_reduction():
    with torch.device('meta'):
        model = InLinePVT(arch='small')
    assert [len(s.blocks) for s in model.stages] == [3, 4, 6, 3]
    assert all(b.attn_type == 'inline' for s in model.stages for b in s.blocks)
    assert not any(n.endswith('.sr') for n, _ in model.named_modules())
    assert model.norm0.eps == model.stages[0].blocks[0].norm1.eps == 1e-6
    assert model.stages[0].patch_embed.norm.eps == 1e-5


def test_spatial_reduction_attention_matches_plain_softmax():
    torch.manual_seed(1)
    attn = SpatialReductionAttention(16, 2, sr_ratio=4).eval()
    h, w = 9, 14                      # not multiples of 4: the last partial cells give no keys
    x = torch.randn(2, h * w, 16)
    with torch.no_grad():
        ours = attn(x, (h, w))
        q = attn.q(x).view(2, h * w, 2, 8).transpose(1, 2)
        red = attn.sr(x.transpose(1, 2).reshape(2, 16, h, w))       # (2, 16, 2, 3)
        red = attn.norm(red.flatten(2).transpose(1, 2))
        k, v = attn.kv(red).view(2, 6, 2, 2, 8).permute(2, 0, 3, 1, 4)
        a = (q @ k.transpose(-2, -1) * 8 ** -0.5).softmax(-1)
        ref = attn.proj((a @ v).transpose(1, 2).reshape(2, h * w, 16))
    assert rel_err(ours, ref) < 1e-5


test_invalid_arguments = invalid_arguments_test(InLinePVT, [
    (dict(depths=(2, 2, 2)), 'embed_dims .* one entry per stage'),
    (dict(num_heads=(2, 4, 10)), 'num_heads'),
    (dict(mlp_ratios=(8, 8, 4)), 'mlp_ratios'),
    (dict(sr_ratios=(8, 4, 0, 1)), 'sr_ratios'),
    (dict(num_heads=(3, 4, 10, 16)), 'not divisible by 3 heads'),
])


def test_converter_merges_q_and_kv_in_order(golden):
    path, _ = golden('inline_pvt_tiny_224')
    sd = torch.load(path, weights_only=True)['model']
    once = InLinePVT(**TINY_GOLDEN).convert_checkpoint(sd)
    qkv = once['stages.2.blocks.0.attn.qkv.weight']
    assert torch.equal(qkv[:80], sd['block3.0.attn.q.weight'])
    assert torch.equal(qkv[80:], sd['block3.0.attn.kv.weight'])
    assert torch.equal(once['stages.0.pos_embed.weight'], sd['pos_embed1'])
    assert not any(k.startswith('head.') or '.q.' in k or '.kv.' in k for k in once)
    assert convert_official(sd)[0] == 'InLinePVT'
    twice = InLinePVT(**TINY_GOLDEN).convert_checkpoint(once)
    assert once.keys() == twice.keys()
    assert all(torch.equal(once[k], twice[k]) for k in once)


def _to_official(state):
    """Our keys -> the official layout (the inverse of the converter), for layouts
    the golden file does not cover (softmax blocks)."""
    out = {}
    for k, v in state.items():
        if k.startswith('norm'):
            continue
        i, rest = int(k.split('.')[1]), k.split('.', 2)[2]
        if rest == 'pos_embed.weight':
            out[f'pos_embed{i + 1}'] = v
        elif rest.startswith('patch_embed.'):
            out[f'patch_embed{i + 1}.' + rest[len('patch_embed.'):]] = v
        else:
            rest = rest[len('blocks.'):]
            if '.attn.qkv.' in rest:
                c = v.shape[0] // 3
                out[f'block{i + 1}.' + rest.replace('qkv', 'q')] = v[:c]
                out[f'block{i + 1}.' + rest.replace('qkv', 'kv')] = v[c:]
            else:
                out[f'block{i + 1}.' + rest] = v
    return out


def test_softmax_blocks_load_from_official_layout(tmp_path):
    src = InLinePVT(**SMALL)
    path = tmp_path / 'official.pth'
    torch.save({'model': _to_official(src.state_dict())}, path)
    assert any(k.endswith('attn.sr.weight') for k in torch.load(path)['model'])
    dst = InLinePVT(**SMALL, init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    dst.init_weights()
    for k, v in src.state_dict().items():
        if not k.startswith('norm'):
            assert torch.equal(dst.state_dict()[k], v), k


def test_loads_every_accepted_layout(golden_layouts):
    paths = golden_layouts('inline_pvt_tiny_224')
    ref = golden_model('inline_pvt_tiny_224', paths['official']).state_dict()
    for name, p in paths.items():
        got = golden_model('inline_pvt_tiny_224', p).state_dict()
        for k, v in ref.items():
            if not k.startswith('norm'):      # output norms are all fresh
                assert torch.equal(got[k], v), (name, k)


def test_wrong_variant_checkpoints_are_refused(tmp_path, golden):
    pvt_path, _ = golden('inline_pvt_tiny_224')
    cswin_path, _ = golden('inline_cswin_tiny_224')
    with pytest.raises(CheckpointError, match='checkpoint of InLineCSwin, not of InLinePVT'):
        golden_model('inline_pvt_tiny_224', cswin_path)
    # Deeper model of the same widths: every tensor of the file fits, yet it is another variant.
    with pytest.raises(CheckpointError, match=r'depths \(1, 1, 1, 1\).*has depths \(1, 2, 1, 1\)'):
        golden_model('inline_pvt_tiny_224', pvt_path, depths=(1, 2, 1, 1))
    # Shallower model from a deeper file (PVT-S into PVT-T would fill every tensor).
    deep = InLinePVT(**{**TINY_GOLDEN, 'depths': (2, 2, 2, 2)})
    deep_path = tmp_path / 'deep.pth'
    torch.save({'model': _to_official(deep.state_dict())}, deep_path)
    with pytest.raises(CheckpointError, match=r"depths \(2, 2, 2, 2\) \(arch='tiny'\)"):
        golden_model('inline_pvt_tiny_224', deep_path)
    wide = InLinePVT(**{**TINY_GOLDEN, 'embed_dims': (32, 64, 160, 256)},
                     init_cfg=dict(type='Pretrained', checkpoint=pvt_path))
    with pytest.raises(CheckpointError, match='other shapes.*another variant'):
        wide.init_weights()
