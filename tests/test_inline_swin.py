"""What is particular to InLine-Swin: outputs equal to the official code's (goldens),
parameter counts of the released variants, the window attention's semantics, the
official checkpoint layout. What every backbone must do: test_backbone_contract.py."""
import pytest
import torch
from conftest import golden_args, golden_model, golden_run, rel_err

from inline_mm.models import CheckpointError, InLineSwin
from support import invalid_arguments_test, param_counts_test

# The architecture of the golden case (its outputs: test_goldens.py).
TINY_GOLDEN = golden_args('inline_swin_tiny_224')
# Small enough for CPU tests, with softmax stages where the windows pad and shift.
SMALL = dict(embed_dims=16, depths=(1, 2, 2, 2), num_heads=(1, 2, 4, 8),
             stage_types=('inline', 'softmax', ('inline', 'softmax'), 'softmax'),
             drop_path_rate=0.)


def test_last_output_norm_is_the_official_norm():
    model, exp, taps, _ = golden_run('inline_swin_tiny_224')
    assert rel_err(model.norm3(taps['stage3']), exp['final_norm']) <= 1e-5


test_param_counts = param_counts_test(
    InLineSwin, {'tiny': (28_454_544, 28_455_888), 'small': (49_024_296, 49_025_640),
                 'base': (87_325_120, 87_326_912)},
    lambda model: sum(2 * d for d in model.dims[:-1]))   # norm0..2; norm3 is the official


def test_base_layout_is_mixed():
    model = InLineSwin(arch='base')
    types = [b.attn_type for b in model.layers[2].blocks]
    assert types == ['inline'] * 2 + ['softmax'] * 16
    assert [b.attn_type for b in model.layers[3].blocks] == ['softmax'] * 2


def _naive_window_attention(attn, x, hw, groups):
    """Softmax attention within each group of token indices, plain loops."""
    b, n, c = x.shape
    h, w = hw
    heads, d = attn.num_heads, c // attn.num_heads
    ws = attn.window_size
    qkv = attn.qkv(x).view(b, n, 3, heads, d)
    out = torch.zeros(b, n, c)
    for idx in groups:
        idx = torch.tensor(idx)
        q, k, v = (qkv[:, idx, j].transpose(1, 2) for j in range(3))     # (B, heads, m, d)
        ys, xs = idx // w, idx % w
        rel = (ys[:, None] - ys[None] + ws - 1) * (2 * ws - 1) + (xs[:, None] - xs[None] + ws - 1)
        bias = attn.relative_position_bias_table[rel].permute(2, 0, 1)
        a = (q * attn.scale @ k.transpose(-2, -1) + bias).softmax(-1)
        out[:, idx] = (a @ v).transpose(1, 2).reshape(b, len(idx), c)
    return attn.proj(out)


def _official_shift_groups(h, w, ws, shift):
    """Token groups that attend to each other in a shifted-window block (h, w multiples
    of ws): the windows of the rolled map, split by the official region labels."""
    def region(p, size):
        return 0 if p < size - ws else (1 if p < size - shift else 2)
    groups = {}
    for y in range(h):
        for x in range(w):
            ry, rx = (y - shift) % h, (x - shift) % w        # position in the rolled map
            key = (ry // ws, rx // ws, region(ry, h), region(rx, w))
            groups.setdefault(key, []).append(y * w + x)
    return list(groups.values())


def test_shifted_windows_match_official_semantics():
    torch.manual_seed(1)
    attn = InLineSwin(**SMALL).layers[1].blocks[1].attn
    x = torch.randn(2, 14 * 21, 32)
    with torch.no_grad():
        ours = attn(x, (14, 21))
        ref = _naive_window_attention(attn, x, (14, 21), _official_shift_groups(14, 21, 7, 3))
    assert rel_err(ours, ref) < 1e-5


def test_padded_windows_ignore_padding():
    """On a 9x10 map the windows are ragged: padded keys get no weight."""
    torch.manual_seed(2)
    attn = InLineSwin(**SMALL).layers[1].blocks[0].attn
    h, w = 9, 10
    x = torch.randn(2, h * w, 32)
    groups = [[y * w + x_ for y in range(r, min(r + 7, h)) for x_ in range(c, min(c + 7, w))]
              for r in range(0, h, 7) for c in range(0, w, 7)]
    with torch.no_grad():
        ours = attn(x, (h, w))
        ref = _naive_window_attention(attn, x, (h, w), groups)
    assert rel_err(ours, ref) < 1e-5


def test_small_map_is_one_unshifted_window():
    """A map that fits in one window (the 7x7 last stage at 224, or 5x6) is neither
    padded nor shifted, even in an odd (shifted) block."""
    torch.manual_seed(3)
    attn = InLineSwin(**SMALL).layers[3].blocks[1].attn
    for h, w in ((7, 7), (5, 6)):
        x = torch.randn(1, h * w, 128)
        with torch.no_grad():
            ours = attn(x, (h, w))
            ref = _naive_window_attention(attn, x, (h, w), [list(range(h * w))])
        assert rel_err(ours, ref) < 1e-5


test_invalid_arguments = invalid_arguments_test(InLineSwin, [
    (dict(depths=(2, 2, 2), num_heads=(3, 6, 12), out_indices=(0, 1, 2)),
     'stage_types has 4 entries'),
    (dict(depths=(2, 2, 2)), 'must have one entry per stage'),
    (dict(num_heads=(3, 6, 12)), 'num_heads'),
    (dict(num_heads=(5, 6, 12, 24)), 'not divisible by 5 heads'),
])


def test_loads_every_accepted_layout(golden_layouts):
    paths = golden_layouts('inline_swin_tiny_224')
    ref = golden_model('inline_swin_tiny_224', paths['official']).state_dict()
    for name, p in paths.items():
        got = golden_model('inline_swin_tiny_224', str(p)).state_dict()
        for k, v in ref.items():
            if k.startswith(('norm0', 'norm1', 'norm2')):
                continue   # fresh output norms
            assert torch.equal(got[k], v), (name, k)


def test_conversion_is_idempotent(golden):
    path, _ = golden('inline_swin_tiny_224')
    sd = torch.load(path, weights_only=True)['model']
    model = InLineSwin(**TINY_GOLDEN)
    once = model.convert_checkpoint(sd)
    assert 'norm3.weight' in once and 'head.weight' not in once
    twice = model.convert_checkpoint(once)
    assert once.keys() == twice.keys()


def test_wrong_variant_checkpoints_are_refused(golden):
    swin_path, _ = golden('inline_swin_tiny_224')
    pvt_path, _ = golden('inline_pvt_tiny_224')
    with pytest.raises(CheckpointError, match='checkpoint of InLinePVT, not of InLineSwin'):
        golden_model('inline_swin_tiny_224', pvt_path)
    # Wider model: every tensor has another shape.
    wide = InLineSwin(**{**TINY_GOLDEN, 'embed_dims': 32, 'num_heads': (2, 4, 8, 16)},
                      init_cfg=dict(type='Pretrained', checkpoint=swin_path))
    with pytest.raises(CheckpointError, match='other shapes.*another variant'):
        wide.init_weights()
    # A deeper, S-like layout (more blocks, stage 2 softmax): another variant.
    deep = InLineSwin(**{**TINY_GOLDEN, 'depths': (2, 2, 6, 2),
                         'stage_types': ('inline', 'inline', 'softmax', 'softmax')},
                      init_cfg=dict(type='Pretrained', checkpoint=swin_path))
    with pytest.raises(CheckpointError, match=r'depths \(2, 2, 2, 2\).*another variant'):
        deep.init_weights()
