"""Padding-aware backbones: an image's features do not depend on its batch mates.

mmdet and mmseg zero-pad the images of a batch to one size (bottom and right, after
normalisation). Every family must give an image the same features, forward and
backward, alone (padded to a multiple of 32) and inside a larger padded batch, and
the same as the image run unpadded; the padding is read from the input or given.
"""
import math

import pytest
import torch

from conftest import rel_err
from inline_mm.deploy.backbone import trace_backbone
from inline_mm.models import FAMILIES, InLineAttention, WindowAttention
from inline_mm.models.padding import NO_PADDING, ValidMap, detect_valid_sizes
from support import load_script, padded_canvas, smoke_backbone

NAMES = list(FAMILIES)
TOL = 1e-5
#: the two paths of the backbones (docs/padding.md, "Two paths"): every contract holds on both
PATHS = {'per-sample': False, 'batched': True}


def valid_map(hw, sizes, batched, prefix=0):
    """A map of Python sizes (the per-sample path) or of a size tensor (the batched one)."""
    return ValidMap(hw, torch.tensor(sizes) if batched else sizes, prefix=prefix)


build = smoke_backbone
canvas = padded_canvas


def region(out, name, i, hw):
    """The part of output ``i`` that belongs to an ``hw`` image."""
    s = FAMILIES[name].stride(i)
    return out[..., :math.ceil(hw[0] / s), :math.ceil(hw[1] / s)]


def weights_like(outs):
    gen = torch.Generator().manual_seed(1)
    return [torch.randn(o.shape[1:], generator=gen) for o in outs]


def loss_on(outs, name, sample, hw, weights):
    """A fixed linear function of one image's region of every output."""
    total = 0
    for i, (o, w) in enumerate(zip(outs, weights)):
        r = region(o[sample], name, i, hw)
        total = total + (r * region(w, name, i, hw)).sum()
    return total


def grads(model):
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def run(model, batch, sample, hw, weights, **kw):
    """Outputs, the parameter gradient of the loss on image ``sample`` and the input
    gradient."""
    model.zero_grad()
    x = batch.clone().requires_grad_()
    outs = model(x, **kw)
    loss_on(outs, model_name(model), sample, hw, weights).backward()
    return outs, grads(model), x.grad


def model_name(model):
    return type(model).__name__


# ------------------------------------------------------------------ the contract
@pytest.mark.parametrize('path', PATHS)
@pytest.mark.parametrize('name', NAMES)
def test_image_alone_and_in_a_larger_padded_batch_agree_forward_and_backward(name, path):
    torch.manual_seed(0)
    model = build(name, batched=PATHS[path]).train()   # smoke: no dropout or drop path
    a, b = torch.randn(3, 72, 104), torch.randn(3, 150, 180)
    alone = canvas([a], (96, 128))        # what a batch of one is padded to (multiple of 32)
    batched = canvas([b, a], (160, 192))  # next to a larger image
    with torch.no_grad():
        weights = weights_like(model(alone))
    outs_a, g_a, x_a = run(model, alone, 0, (72, 104), weights)
    outs_b, g_b, x_b = run(model, batched, 1, (72, 104), weights)
    for i, (oa, ob) in enumerate(zip(outs_a, outs_b)):
        assert rel_err(region(ob[1], name, i, (72, 104)), region(oa[0], name, i, (72, 104))) < TOL
        # Features outside an image leave the backbone as zeros.
        for o, hw in ((oa[0], (72, 104)), (ob[1], (72, 104)), (ob[0], (150, 180))):
            inside = torch.zeros_like(o, dtype=torch.bool)
            region(inside, name, i, hw)[...] = True
            assert not o[~inside].any()
    # Gradients: the loss on A's features reaches the same parameters by the same
    # amounts, and only A's own pixels.
    assert rel_err(g_b, g_a) < TOL
    assert rel_err(x_b[1, :, :72, :104], x_a[0, :, :72, :104]) < TOL
    assert not x_b[0].any() and not x_b[1, :, 72:].any() and not x_b[1, :, :, 104:].any()


@pytest.mark.parametrize('path', PATHS)
@pytest.mark.parametrize('name', NAMES)
def test_padded_image_gets_the_features_of_the_unpadded_image(name, path):
    """The strongest form: as if the image had never been padded at all."""
    model = build(name, batched=PATHS[path]).eval()
    a = torch.randn(3, 72, 104)
    with torch.no_grad():
        raw = model(a[None])
        padded = model(canvas([a, torch.randn(3, 120, 200)], (128, 224)))
    for r, p in zip(raw, padded):
        assert rel_err(p[0, :, :r.shape[2], :r.shape[3]], r[0]) < TOL


@pytest.mark.parametrize('name', NAMES)
def test_pad_aware_false_lets_padding_in(name):
    """The switch restores the plain computation over the whole padded map (so the
    agreement above is padding awareness at work, not a test that cannot fail)."""
    model = build(name, pad_aware=False).eval()
    a = torch.randn(3, 72, 104)
    with torch.no_grad():
        raw = model(a[None])
        padded = model(canvas([a, torch.randn(3, 120, 200)], (128, 224)))
    last = raw[-1]
    assert rel_err(padded[-1][0, :, :last.shape[2], :last.shape[3]], last[0]) > 1e-3


@pytest.mark.parametrize('path', PATHS)
@pytest.mark.parametrize('name', NAMES)
def test_inputs_without_padding_give_the_plain_outputs(name, path):
    """Exactly on the per-sample path (it reads that nothing is padded and takes the plain
    operations); to rounding on the batched one (it masks without looking)."""
    torch.manual_seed(0)
    aware = build(name, batched=PATHS[path]).train()
    plain = build(name, pad_aware=False, batched=PATHS[path]).train()
    plain.load_state_dict(aware.state_dict())
    x = torch.randn(2, 3, 64, 96)
    assert aware.valid_map(x).is_padded == PATHS[path]
    weights = weights_like(aware(x))
    outs_a, g_a, x_a = run(aware, x, 0, (64, 96), weights)
    outs_p, g_p, x_p = run(plain, x, 0, (64, 96), weights)
    if path == 'per-sample':
        assert all(torch.equal(a, p) for a, p in zip(outs_a, outs_p))
        assert torch.equal(g_a, g_p) and torch.equal(x_a, x_p)
    else:
        assert all(rel_err(a, p) < TOL for a, p in zip(outs_a, outs_p))
        assert rel_err(g_a, g_p) < TOL and rel_err(x_a, x_p) < TOL


@pytest.mark.parametrize('name', NAMES)
def test_batched_path_equals_per_sample_path_forward_and_backward(name):
    """The two paths on one padded batch of three sizes: features, parameter and input
    gradients."""
    torch.manual_seed(0)
    per = build(name, batched=False).train()
    bat = build(name, batched=True).train()
    bat.load_state_dict(per.state_dict())
    batch = canvas([torch.randn(3, 96, 128), torch.randn(3, 64, 70), torch.randn(3, 40, 33)],
                   (96, 128))
    weights = weights_like(per(batch))
    outs_p, g_p, x_p = run(per, batch, 1, (64, 70), weights)
    outs_b, g_b, x_b = run(bat, batch, 1, (64, 70), weights)
    for p, b in zip(outs_p, outs_b):
        assert rel_err(b, p) < TOL
    assert rel_err(g_b, g_p) < TOL and rel_err(x_b, x_p) < TOL


# ------------------------------------------------------------------ edge cases
EDGE_CASES = {
    # name: (images' sizes, canvas); each image is compared with itself unpadded
    'minimum_size_region': ([(32, 32), (90, 120)], (96, 128)),
    'rows_only': ([(70, 128), (96, 128)], (96, 128)),
    'columns_only': ([(96, 70), (96, 128)], (96, 128)),
    'every_image_padded': ([(72, 104), (100, 90), (45, 61)], (128, 128)),
}


@pytest.mark.parametrize('path', PATHS)
@pytest.mark.parametrize('case', list(EDGE_CASES))
@pytest.mark.parametrize('name', NAMES)
def test_edge_cases_match_each_image_unpadded(name, case, path):
    sizes, hw = EDGE_CASES[case]
    model = build(name, batched=PATHS[path]).eval()
    images = [torch.randn(3, *s) for s in sizes]
    with torch.no_grad():
        batched = model(canvas(images, hw))
        for k, img in enumerate(images):
            for r, o in zip(model(img[None]), batched):
                assert rel_err(o[k, :, :r.shape[2], :r.shape[3]], r[0]) < TOL, (k, case)


def test_no_padding_at_all_takes_the_plain_path():
    model = build('InLineSwin', batched=False)
    assert model.valid_map(torch.randn(2, 3, 64, 64)) is NO_PADDING
    x = canvas([torch.randn(3, 64, 40)], (64, 64))
    assert model.valid_map(x).sizes == [(64, 40)]
    assert not build('InLineSwin', pad_aware=False).valid_map(x).is_padded
    # The batched path keeps the sizes on the device, unread, whatever they are.
    batched = build('InLineSwin', batched=True).valid_map(x)
    assert batched.sizes is None
    assert batched.size_tensor.tolist() == [[64, 40]]


def test_the_path_follows_the_device_unless_chosen():
    from inline_mm.models.impl import choose_path
    assert choose_path('auto', torch.device('cpu')) == 'kernel'
    assert choose_path('auto', torch.device('cuda')) == 'plain'   # no device needed to decide
    assert choose_path('plain', torch.device('cpu')) == 'plain'
    assert choose_path('kernel', torch.device('cuda')) == 'kernel'
    with pytest.raises(ValueError, match='batched must be None'):
        build('InLineSwin', batched='yes')
    with pytest.raises(ValueError, match="impl='fast'"):
        build('InLineSwin', impl='fast')


# ------------------------------------------------------------------ reading the padding
def test_detect_valid_sizes_reads_trailing_zero_rows_and_columns():
    x = torch.zeros(4, 3, 20, 30)
    x[0, :, :20, :30] = 1                      # unpadded
    x[1, 1, :12, :25] = torch.rand(12, 25) + 1  # content in one channel only
    x[2, :, 5, 7] = 1                          # a single pixel: region ends there
    # x[3] is all zero: taken as unpadded (nothing to go by)
    assert detect_valid_sizes(x).tolist() == [[20, 30], [12, 25], [6, 8], [20, 30]]
    # Zero rows inside an image are content, not padding.
    y = torch.ones(1, 3, 20, 30)
    y[:, :, 5:10] = 0
    y[:, :, :, 3:9] = 0
    assert detect_valid_sizes(y).tolist() == [[20, 30]]


def test_a_raw_black_bottom_row_reads_as_padding():
    """The documented assumption: an unnormalised image whose last rows are black
    (exactly 0) looks like padding; normalised images (what the data preprocessors
    feed) are not zero there."""
    img = torch.rand(1, 3, 64, 64) + 0.1
    img[:, :, 50:] = 0
    assert detect_valid_sizes(img).tolist() == [[50, 64]]
    normalised = (img - 0.45) / 0.25
    assert detect_valid_sizes(normalised).tolist() == [[64, 64]]


@pytest.mark.parametrize('path', PATHS)
def test_regions_below_the_minimum_input_are_widened_to_it(path):
    model = build('InLineSwin', batched=PATHS[path])
    x = canvas([torch.randn(3, 10, 50)], (96, 96))
    assert model.valid_map(x).host_sizes() == [(32, 50)]
    assert model.valid_map(x, valid_sizes=[(10, 50)]).host_sizes() == [(32, 50)]


@pytest.mark.parametrize('path', PATHS)
def test_explicit_valid_sizes_override_and_ignore_what_lies_outside(path):
    model = build('InLinePVT', batched=PATHS[path]).eval()
    a, b = torch.randn(3, 72, 104), torch.randn(3, 96, 128)
    clean = canvas([a, b], (96, 128))
    dirty = clean.clone()
    dirty[0, :, 72:] = 5.0                          # a non-zero pad value
    dirty[0, :, :, 104:] = -3.0
    with torch.no_grad():
        expected = model(clean)
        got = model(dirty, valid_sizes=[(72, 104), (96, 128)])
        unaware = model(dirty)
    for e, g in zip(expected, got):
        assert rel_err(g, e) < TOL
    assert rel_err(unaware[0][0], expected[0][0]) > 1e-3


@pytest.mark.parametrize('sizes, match', [
    ([(72, 104)], 'one \\(h, w\\) per image'),
    ([(72, 104), (97, 128)], 'do not fit the 96x128 input'),
    ([(0, 104), (96, 128)], 'do not fit'),
    ([(72,), (96, 128)], 'one \\(h, w\\) per image'),
])
def test_bad_valid_sizes_say_what_is_wrong(sizes, match):
    model = build('InLineSwin')
    with pytest.raises(ValueError, match=match):
        model(torch.randn(2, 3, 96, 128), valid_sizes=sizes)


# ------------------------------------------------------------------ the pieces
@pytest.mark.parametrize('path', PATHS)
def test_attention_with_counts_matches_each_image_alone_forward_and_backward(path):
    """The kernel's closed-form backward (per-sample) and the plain form (batched) with
    per-image token counts, against the attention run on each image's tokens alone."""
    torch.manual_seed(0)
    attn = InLineAttention(32, 4, lepe=False)
    hw, sizes = (9, 11), [(9, 11), (5, 7), (3, 11)]
    x = torch.randn(3, 99, 32, requires_grad=True)
    valid = valid_map(hw, sizes, PATHS[path])
    out = attn(x, hw, valid=valid)
    w = torch.randn_like(out)
    (valid.zero(out) * w).sum().backward()
    g_batched = [p.grad.clone() for p in attn.parameters()]
    for p in attn.parameters():
        p.grad = None
    total_x = []
    for k, (h, wd) in enumerate(sizes):
        xk = x.detach()[k].view(*hw, 32)[:h, :wd].reshape(1, h * wd, 32).requires_grad_()
        ok = attn(xk, (h, wd))
        ref = out[k].view(*hw, 32)[:h, :wd].reshape(1, h * wd, 32)
        assert rel_err(ref, ok) < TOL
        (ok * w[k].view(*hw, 32)[:h, :wd].reshape(1, h * wd, 32)).sum().backward()
        total_x.append(xk.grad)
    for gb, p in zip(g_batched, attn.parameters()):
        assert rel_err(gb, p.grad) < TOL
    for k, (h, wd) in enumerate(sizes):
        gx = x.grad[k].view(*hw, 32)
        assert rel_err(gx[:h, :wd].reshape(1, -1, 32), total_x[k]) < TOL
        assert not gx[h:].any() and not gx[:, wd:].any()


@pytest.mark.parametrize('path', PATHS)
def test_attend_leaves_the_callers_qkv_as_it_was(path):
    """attend() (the plain form on a projection output) reads the caller's qkv without
    writing it and gives each image what forward() gives it (the kernel on the per-sample
    map): outputs and gradients alike, class token included. Tokens outside an image are
    not defined."""
    torch.manual_seed(0)
    hw, sizes = (9, 11), [(9, 11), (5, 7), (3, 11)]
    for prefix in (0, 1):
        attn = InLineAttention(32, 4, lepe=True, num_prefix_tokens=prefix)
        valid = valid_map(hw, sizes, PATHS[path], prefix)
        x = torch.randn(3, prefix + 99, 32, requires_grad=True)
        qkv = attn.qkv(x)
        before = qkv.detach().clone()
        out = valid.zero(attn.proj(attn.attend(qkv, hw, valid.mean(x), valid)))
        assert torch.equal(qkv.detach(), before)
        ref = valid.zero(attn(x, hw, valid=valid))
        assert rel_err(out, ref) < TOL
        w = torch.randn_like(out)
        params = [x] + list(attn.parameters())
        for g, e in zip(torch.autograd.grad((out * w).sum(), params),
                        torch.autograd.grad((ref * w).sum(), params)):
            assert rel_err(g, e) < TOL


@pytest.mark.parametrize('path', PATHS)
def test_window_attention_gives_each_image_its_own_windows_and_shift(path):
    """A 7x10 region inside a 10x14 map: one unshifted window row (fits), shifted
    columns, as alone; and in the same batch an image that fills the map and one
    that fits in one window. 15x16 in a 21x23 map: shifted within its own 21x21."""
    torch.manual_seed(0)
    attn = WindowAttention(16, 2, window_size=7, shift=True).eval()
    assert attn.layout((7, 10)) == (7, 7, 0, 3) and attn.layout((10, 14)) == (7, 7, 3, 3)
    assert attn.layout((5, 3)) == (5, 3, 0, 0)
    for hw, sizes in (((10, 14), [(10, 14), (7, 10), (5, 3)]),
                      ((21, 23), [(15, 16), (21, 23), (8, 22)])):
        x = torch.randn(3, hw[0] * hw[1], 16)
        valid = valid_map(hw, sizes, PATHS[path])
        with torch.no_grad():
            out = attn(x, hw, valid=valid)
            for k, (h, w) in enumerate(sizes):
                own = x[k].view(*hw, 16)[:h, :w].reshape(1, h * w, 16)
                got = out[k].view(*hw, 16)[:h, :w].reshape(1, h * w, 16)
                assert rel_err(got, attn(own, (h, w))) < TOL, (hw, k)


def test_window_attention_on_sdpa_matches_the_formula():
    """softmax(q k^T / sqrt(d) + relative bias + shift mask) v, written out, on an
    unpadded shifted map; and the index is a buffer outside the state dict."""
    torch.manual_seed(0)
    attn = WindowAttention(16, 2, window_size=4, shift=True).eval()
    assert 'relative_position_index' not in attn.state_dict()
    x = torch.randn(2, 8 * 8, 16)
    with torch.no_grad():
        got = attn(x, (8, 8))
        t = torch.roll(x.view(2, 8, 8, 16), (-2, -2), (1, 2))
        win = t.view(2, 2, 4, 2, 4, 16).permute(0, 1, 3, 2, 4, 5).reshape(8, 16, 16)
        q, k, v = attn.qkv(win).view(8, 16, 3, 2, 8).permute(2, 0, 3, 1, 4)
        ys, xs = torch.meshgrid(torch.arange(4), torch.arange(4), indexing='ij')
        ys, xs = ys.flatten(), xs.flatten()
        index = (ys[:, None] - ys[None, :] + 3) * 7 + (xs[:, None] - xs[None, :] + 3)
        bias = attn.relative_position_bias_table[index].permute(2, 0, 1)
        # Swin's regions of the rolled 8x8 map: rows/cols 0-3 | 4-5 | 6-7.
        part = torch.tensor([0, 0, 0, 0, 1, 1, 2, 2])
        label = (part[:, None] * 3 + part[None, :]).view(2, 4, 2, 4).permute(0, 2, 1, 3)
        label = label.reshape(4, 16)
        mask = (label[:, None, :] != label[:, :, None]).float() * -100
        logits = q @ k.transpose(-2, -1) * 8 ** -0.5 + bias + mask.repeat(2, 1, 1)[:, None]
        out = (logits.softmax(-1) @ v).transpose(1, 2).reshape(8, 16, 16)
        out = attn.proj(out).view(2, 2, 2, 4, 4, 16).permute(0, 1, 3, 2, 4, 5).reshape(2, 8, 8, 16)
        ref = torch.roll(out, (2, 2), (1, 2)).reshape(2, 64, 16)
    assert rel_err(got, ref) < TOL


def test_gradient_checkpointing_with_padding_matches():
    torch.manual_seed(0)
    model = build('InLineCSwin').train()
    batch = canvas([torch.randn(3, 72, 104), torch.randn(3, 96, 128)], (96, 128))
    weights = weights_like(model(batch))
    _, g_plain, x_plain = run(model, batch, 0, (72, 104), weights)
    model.with_cp = True
    _, g_cp, x_cp = run(model, batch, 0, (72, 104), weights)
    assert rel_err(g_cp, g_plain) < 1e-6 and rel_err(x_cp, x_plain) < 1e-6


# ------------------------------------------------------------------ export
@pytest.mark.parametrize('name', ['InLineSwin', 'InLineDeiT'])
def test_traced_graphs_are_padding_unaware(name):
    """Decided: a traced or exported graph computes with ``pad_aware=False`` (the
    reading of the padding is data-dependent); the eager model stays aware."""
    model = build(name).eval()
    batch = canvas([torch.randn(3, 72, 104), torch.randn(3, 96, 128)], (96, 128))
    traced = trace_backbone(model, (96, 128))
    model.pad_aware = False
    with torch.no_grad():
        plain = model(batch)
        model.pad_aware = True
        aware = model(batch)
        got = traced(batch)
    for g, p in zip(got, plain):
        assert rel_err(g, p) < 1e-5
    assert rel_err(got[-1], aware[-1]) > 1e-3


@pytest.mark.parametrize('name', NAMES)
def test_traced_valid_sizes_are_a_graph_input(name):
    """A graph traced with a (B, 2) tensor of sizes takes them as an input: each image of
    another padded batch of another batch size gets its features alone; Python sizes
    (constants of the graph) are refused."""
    model = build(name).eval()

    class WithSizes(torch.nn.Module):
        def __init__(self, sizes=None):
            super().__init__()
            self.model, self.sizes = model, sizes

        def forward(self, x, sizes):
            return tuple(self.model(x, valid_sizes=self.sizes or sizes))

    example = torch.randn(2, 3, 64, 96), torch.tensor([[64, 96], [40, 70]])
    with pytest.raises(ValueError, match='must be a \\(B, 2\\) tensor'):
        torch.jit.trace(WithSizes([(64, 64), (64, 64)]), example, check_trace=False)
    traced = torch.jit.trace(WithSizes(), example, check_trace=False)
    images = [torch.randn(3, 33, 50), torch.randn(3, 64, 96), torch.randn(3, 50, 37)]
    sizes = torch.tensor([im.shape[1:] for im in images])
    with torch.no_grad():
        got = traced(canvas(images, (64, 96)), sizes)
        for i, im in enumerate(images):
            for g, a in zip(got, model(im[None])):
                h, w = a.shape[-2:]
                assert rel_err(g[i:i + 1, :, :h, :w], a) < 1e-5
                assert not g[i, :, h:].any() and not g[i, :, :, w:].any()


# ------------------------------------------------------------------ the data preprocessors
def _uint8(h, w, seed):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (3, h, w), generator=gen, dtype=torch.uint8)


@pytest.mark.parametrize('name', NAMES)
def test_mmdet_preprocessor_batches_give_each_image_its_own_features(name):
    from mmdet.models.data_preprocessors import DetDataPreprocessor
    from mmdet.structures import DetDataSample
    pre = DetDataPreprocessor(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375],
                              bgr_to_rgb=True, pad_size_divisor=32)
    model = build(name).eval()
    images = [_uint8(100, 150, 0), _uint8(200, 120, 1), _uint8(64, 64, 2)]

    def features(imgs):
        data = pre(dict(inputs=imgs, data_samples=[DetDataSample() for _ in imgs]), False)
        with torch.no_grad():
            return data['inputs'], model(data['inputs'])

    batch, outs = features(images)
    assert batch.shape[-2:] == (224, 160)
    for k, img in enumerate(images):
        x, alone = features([img])
        for i, (a, o) in enumerate(zip(alone, outs)):
            hw = img.shape[1:]
            assert rel_err(region(o[k], name, i, hw), region(a[0], name, i, hw)) < TOL


@pytest.mark.parametrize('name', NAMES)
def test_mmseg_preprocessor_batches_give_each_image_its_own_features(name):
    from mmseg.models.data_preprocessor import SegDataPreProcessor
    from mmseg.structures import SegDataSample
    from mmengine.structures import PixelData
    pre = SegDataPreProcessor(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375],
                              bgr_to_rgb=True, size_divisor=32, pad_val=0, seg_pad_val=255)
    model = build(name).eval()
    images = [_uint8(96, 160, 3), _uint8(150, 90, 4)]

    def sample(img):
        s = SegDataSample()
        s.gt_sem_seg = PixelData(data=torch.zeros(1, *img.shape[1:], dtype=torch.long))
        return s

    def features(imgs):
        data = pre(dict(inputs=imgs, data_samples=[sample(i) for i in imgs]), True)
        with torch.no_grad():
            return model(data['inputs'])

    outs = features(images)
    for k, img in enumerate(images):
        for i, (a, o) in enumerate(zip(features([img]), outs)):
            hw = img.shape[1:]
            assert rel_err(region(o[k], name, i, hw), region(a[0], name, i, hw)) < TOL


@pytest.mark.parametrize('name', NAMES)
def test_autocast_with_padding_stays_finite(name):
    model = build(name).train()
    x = canvas([torch.randn(3, 72, 100), torch.randn(3, 96, 128)], (96, 128)).requires_grad_()
    with torch.autocast('cpu', dtype=torch.bfloat16):
        outs = model(x)
    sum(o.float().sum() for o in outs).backward()
    assert all(torch.isfinite(o).all() for o in outs)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    assert not x.grad[0, :, 72:].any()


def test_padding_features_tool_reports_before_and_after(capsys):
    """The command of docs/padding.md's table, on a smoke model."""
    tool = load_script('tools/analysis_tools/padding_features.py')
    tool.main(['--smoke', '--families', 'InLineCSwin', '--cases', 'small'])
    row = [line for line in capsys.readouterr().out.splitlines()
           if line.startswith('| InLineCSwin-smoke')]
    assert len(row) == 1
    before, after = ([float(v) for v in cell.split(' / ')] for cell in row[0].split('|')[3:5])
    assert len(before) == len(after) == 4
    assert min(before) > 1e-3 and max(after) < 1e-5


# ------------------------------------------------------------------ the RPN head
def _rpn_heads():
    from mmdet.models.dense_heads import RPNHead
    from mmdet.registry import MODELS
    from mmengine.config import ConfigDict
    from mmengine.registry import DefaultScope
    cfg = dict(in_channels=8, feat_channels=8,
               anchor_generator=dict(type='AnchorGenerator', scales=[8], ratios=[0.5, 1.0, 2.0],
                                     strides=[4, 8, 16, 32, 64]),
               bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[.0, .0, .0, .0],
                               target_stds=[1.0, 1.0, 1.0, 1.0]),
               test_cfg=ConfigDict(nms_pre=50, max_per_img=20, min_bbox_size=0,
                                   nms=dict(type='nms', iou_threshold=0.7)))
    # Another test may have left another default scope current: build under mmdet's.
    with DefaultScope.overwrite_default_scope('mmdet'):
        return MODELS.build(dict(type='PadAwareRPNHead', **cfg)), RPNHead(**cfg)


def test_pad_aware_rpn_head_proposes_from_each_images_own_anchors():
    """An image's proposals come from the cells of its own ``pad_shape`` (those its
    training targets use): the stock head's proposals for that image alone."""
    aware, stock = _rpn_heads()
    gen = torch.Generator().manual_seed(0)
    sizes = [(160, 224), (96, 128)]                       # the batch map is 160x224
    levels = [(40, 56), (20, 28), (10, 14), (5, 7), (3, 4)]
    scores = [torch.randn(2, 3, h, w, generator=gen) for h, w in levels]
    deltas = [torch.randn(2, 12, h, w, generator=gen) * 0.1 for h, w in levels]
    metas = [dict(img_shape=s, pad_shape=s, batch_input_shape=(160, 224)) for s in sizes]
    got = aware.predict_by_feat(scores, deltas, batch_img_metas=metas)
    for i, (h, w) in enumerate(sizes):
        own = [(-(-h // s), -(-w // s)) for s in (4, 8, 16, 32, 64)]
        crop = lambda maps: [m[i:i + 1, :, :r, :c] for m, (r, c) in zip(maps, own)]  # noqa: E731
        alone = stock.predict_by_feat(crop(scores), crop(deltas), batch_img_metas=[metas[i]])[0]
        assert torch.equal(got[i].bboxes, alone.bboxes) and torch.equal(got[i].scores, alone.scores)
    # The small image's proposals differ from what the stock head makes of the batch.
    batched = stock.predict_by_feat(scores, deltas, batch_img_metas=metas)
    assert not torch.equal(batched[1].scores, got[1].scores)
    # A batch whose images all fill the map: the stock computation.
    full = [dict(m, img_shape=(160, 224), pad_shape=(160, 224)) for m in metas]
    for a, s in zip(aware.predict_by_feat(scores, deltas, batch_img_metas=full),
                    stock.predict_by_feat(scores, deltas, batch_img_metas=full)):
        assert torch.equal(a.bboxes, s.bboxes) and torch.equal(a.scores, s.scores)


def test_pad_aware_rpn_head_scores_in_fp32_under_autocast():
    """Without autocast the stock head's outputs exactly; under bf16 autocast the 3x3 conv
    runs in bf16 and the objectness and deltas come out in fp32, computed from its output."""
    aware, stock = _rpn_heads()
    stock.load_state_dict(aware.state_dict())
    feats = [torch.randn(2, 8, h, w, generator=torch.Generator().manual_seed(h))
             for h, w in ((40, 56), (20, 28), (10, 14))]
    for a, s in zip(aware(feats), stock(feats)):
        assert all(torch.equal(x, y) for x, y in zip(a, s))
    with torch.autocast('cpu', dtype=torch.bfloat16):
        scores, deltas = aware(feats)
        hidden = torch.relu(aware.rpn_conv(feats[0]))
    assert hidden.dtype == torch.bfloat16
    assert {t.dtype for t in scores + deltas} == {torch.float32}
    assert torch.equal(scores[0], aware.rpn_cls(hidden.float()))
    assert torch.equal(deltas[0], aware.rpn_reg(hidden.float()))


def test_zeroing_in_place_writes_the_padding_only_and_zeroes_its_gradient():
    """``zero_`` (a norm's output, in place) and ``zero_own`` (a stage output about to be
    merged) give ``zero``'s values; the gradient outside the images is 0; ``zero_own``
    copies while autograd records, and writes in place (nothing else) when it does not."""
    valid = ValidMap((4, 5), [(4, 5), (2, 3)], 'cpu', prefix=1)
    base = torch.randn(2, 21, 3, requires_grad=True)
    inside = valid.mask[..., None]
    ref = torch.where(inside, base.detach() * 2, 0.)
    g = torch.randn(2, 21, 3)

    y = base * 2
    out = valid.zero_(y)
    assert out is y and torch.equal(out.detach(), ref)
    out.backward(g)
    assert torch.equal(base.grad, torch.where(inside, 2 * g, 0.))

    y = base * 2
    out = valid.zero_own(y)
    assert out is not y and torch.equal(y.detach(), base.detach() * 2)   # recorded: a copy
    assert torch.equal(out.detach(), ref)
    with torch.no_grad():
        y = base * 2
        assert valid.zero_own(y) is y and torch.equal(y, ref)

    # the rectangles outside each image, and only those, are written
    t = torch.full((2, 4, 5, 3), 7.)
    from inline_mm.models.padding import zero_outside_
    zero_outside_(t, [(4, 5), (2, 3)])
    assert (t[0] == 7).all() and (t[1, :2, :3] == 7).all()
    assert not t[1, 2:].any() and not t[1, :2, 3:].any()


@pytest.mark.parametrize('path', PATHS)
def test_table_puts_each_images_resized_table_in_its_region_and_zeros_elsewhere(path):
    """One grid_sample with a per-image grid gives what F.interpolate gives each image
    alone (bilinear, align_corners=False), up- and downsampled, and the gradient too."""
    import torch.nn.functional as F
    sizes = [(12, 15), (7, 3), (2, 1), (4, 9)]
    valid = valid_map((12, 15), sizes, PATHS[path])
    table = torch.randn(1, 6, 4, 9, dtype=torch.float64, requires_grad=True)
    out = valid.table(table, (12, 15)).view(4, 12, 15, 6)
    g = torch.randn_like(out)
    (out * g).sum().backward()
    got_grad, table.grad = table.grad, None
    ref_grad = 0
    for i, (h, w) in enumerate(sizes):
        ref = F.interpolate(table, size=(h, w), mode='bilinear', align_corners=False)
        ref = ref[0].permute(1, 2, 0)
        assert rel_err(out[i, :h, :w], ref) < 1e-12, (h, w)
        assert not out[i, h:].any() and not out[i, :h, w:].any()
        ref_grad = ref_grad + torch.autograd.grad((ref * g[i, :h, :w]).sum(), table)[0]
    assert rel_err(got_grad, ref_grad) < 1e-12
