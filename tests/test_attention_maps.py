"""Attention maps (inline_mm.visualization.attention_maps, tools/attention_map.py): the weights are
exact.

InLine's rows sum to 1 and, applied to V, give the block's global term; with the local
kernel they give the block's whole output. Linear rows sum to 1 and cannot tell q from 2q;
Softmax is torch's. An image's weights in a padded batch are those of the image alone;
InLine-DeiT's class token is a query and a key. The tool writes the figure it says.
"""
import json
import shlex
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from conftest import rel_err

from benchmarks import reference
from inline_mm.visualization.attention_maps import (AttentionSiteError, Preprocess, attention_maps,
                                                    block_weights, attention_sites,
                                                    capture_attention, find_attention, grid_points,
                                                    head_kernel, inline_weights, linear_weights,
                                                    local_kernels, map_stride, point_to_cell,
                                                    softmax_weights)
from inline_mm.visualization.attention_views import figure_size
from inline_mm.models import FAMILIES
from support import ROOT, load_script, smoke_backbone, subprocess_env

NAMES = list(FAMILIES)
TOL = 1e-5
TOOL = ROOT / 'tools' / 'attention_map.py'


def build(name):
    return smoke_backbone(name, seed=0).eval()


def first_inline(model):
    site = next(s for s in attention_sites(model) if s.inline)
    return site.stage, site.block


def global_term(q, k, v, scale, index):
    """The formula's global term (written out, ``benchmarks/reference.py``) of image 0 of
    ``(B, heads, N, d)`` q, k, v, on its tokens ``index``: ``(heads, n, d)`` float64."""
    return reference.inline_attention(q.double(), k.double(), v.double(), scale)[0][:, index]


def all_weights(cap, image):
    tokens = cap.image(image)
    return tokens, dict(inline=inline_weights(tokens.q, tokens.k, cap.scale),
                        linear=linear_weights(tokens.q, tokens.k),
                        softmax=softmax_weights(tokens.q, tokens.k, cap.scale))


def local_term(cap, tokens):
    """The local term of the block's output on the image's grid tokens, from
    :func:`local_kernels` and V of the image alone (zero padding past its border)."""
    attn = cap.module
    h, w = tokens.grid
    p = tokens.prefix
    c = attn.dim
    v_img = tokens.v[:, p:].transpose(0, 1).reshape(h, w, c).permute(2, 0, 1)[None]
    kernels = local_kernels(attn, tokens.token_mean)
    if kernels is None:
        return torch.zeros(h * w, c, dtype=torch.float64)
    out = F.conv2d(v_img, kernels.view(c, 1, 3, 3), padding=1, groups=c)
    if attn.lepe is not None:
        out = out + attn.lepe.bias.double().view(1, c, 1, 1)
    return out[0].flatten(1).t()                                     # (h * w, C)


# ------------------------------------------------------------------ exactness
@pytest.mark.parametrize('name', NAMES)
def test_inline_weights_sum_to_one_and_give_the_block_output(name):
    """Rows sum to 1; weights @ V is the formula's global term; plus the local kernel's
    term it is the block's whole output (a non-square map)."""
    model = build(name)
    x = torch.randn(1, 3, 64, 96)
    cap = capture_attention(model, x, *first_inline(model))
    tokens, w = all_weights(cap, 0)
    p = cap.num_prefix_tokens
    assert cap.hw[0] != cap.hw[1]
    assert (w['inline'].sum(-1) - 1).abs().max() < TOL
    mine = w['inline'] @ tokens.v                                  # (heads, n, d)
    assert rel_err(mine, global_term(*cap.qkv_heads(), cap.scale, tokens.index)) < TOL
    whole = mine.transpose(0, 1).reshape(len(tokens.index), -1)    # (n, C)
    whole[p:] += local_term(cap, tokens)
    assert rel_err(whole, cap.output[0].double()) < TOL


@pytest.mark.parametrize('name', NAMES)
def test_weights_of_an_image_in_a_padded_batch_are_those_of_the_image_alone(name):
    model = build(name)
    torch.manual_seed(1)
    a, b = torch.randn(3, 64, 96), torch.randn(3, 96, 128)
    batch = torch.zeros(2, 3, 96, 128)
    batch[0], batch[1, :, :64, :96] = b, a                  # zero-padded bottom/right
    where = first_inline(model)
    alone = capture_attention(model, a[None], *where)
    padded = capture_attention(model, batch, *where)
    assert padded.valid.is_padded and padded.grid_of(1) == alone.grid_of(0)
    tok_a, w_a = all_weights(alone, 0)
    tok_b, w_b = all_weights(padded, 1)
    assert tok_b.q.shape == tok_a.q.shape
    for method in w_a:
        assert rel_err(w_b[method], w_a[method]) < TOL, method
    assert rel_err(local_kernels(padded.module, tok_b.token_mean),
                   local_kernels(alone.module, tok_a.token_mean)) < TOL
    # ... and image 1's whole output there is what the weights and kernel say.
    whole = (w_b['inline'] @ tok_b.v).transpose(0, 1).reshape(len(tok_b.index), -1)
    whole[tok_b.prefix:] += local_term(padded, tok_b)
    assert rel_err(whole, padded.output[1, tok_b.index].double()) < TOL


#: the paper's switches (inline_cfg of issue #25) whose blocks' outputs the weights must give
SWITCHES = [dict(kernel='relu'), dict(kernel='exp'), dict(attention='linear', kernel='relu'),
            dict(attention='linear', kernel='leakyrelu'), dict(local_residual=False)]


@pytest.mark.parametrize('switches', SWITCHES, ids=lambda d: ','.join(f'{k}={v}' for k, v in
                                                                      d.items()))
@pytest.mark.parametrize('name', ['InLineSwin', 'InLineCSwin', 'InLineDeiT'])
def test_a_switched_block_output_is_its_weights_and_kernel(name, switches):
    """With a kernel phi, linear attention or no local term, the block's weights
    (block_weights) @ V plus the local kernel's term are its output, image by image of a
    padded batch (CSwin: LePE; DeiT: the class token)."""
    family = FAMILIES[name]
    torch.manual_seed(0)
    model = family.cls(**family.smoke, inline_cfg=switches).eval()
    batch = torch.randn(2, 3, 64, 96)
    batch[1, :, 40:], batch[1, :, :, 70:] = 0, 0
    cap = capture_attention(model, batch, *first_inline(model))
    assert cap.module.attention == switches.get('attention', 'inline')
    for image in (0, 1):
        tokens = cap.image(image)
        weights = block_weights(cap, image)
        if cap.module.attention == 'inline':
            assert (weights.sum(-1) - 1).abs().max() < TOL
        whole = (weights @ tokens.v).transpose(0, 1).reshape(len(tokens.index), -1)
        whole[tokens.prefix:] += local_term(cap, tokens)
        assert rel_err(whole, cap.output[image, tokens.index].double()) < TOL, image


def test_a_windowed_block_is_refused():
    family = FAMILIES['InLineSwin']
    model = family.cls(**family.smoke, inline_cfg=dict(window_size=4)).eval()
    with pytest.raises(AttentionSiteError, match='4x4 windows'):
        capture_attention(model, torch.randn(1, 3, 64, 64), 0, 0)


def test_linear_rows_sum_to_one_and_cannot_tell_q_from_2q():
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 5, 8, generator=gen).double()
    k = torch.randn(2, 30, 8, generator=gen).double()
    q[0, 4] = -q[0, 4].abs()                                # ReLU zeroes this query
    lin = linear_weights(q, k)
    defined = lin.abs().sum(-1) > 0
    assert not defined[0, 4] and defined.sum() == 9         # its row has no distribution
    assert (lin.sum(-1)[defined] - 1).abs().max() < TOL
    assert (lin >= 0).all()
    assert torch.allclose(linear_weights(2 * q, k), lin, atol=1e-12)
    inl = inline_weights(q, k, 8 ** -0.5)
    assert (inl.sum(-1) - 1).abs().max() < TOL
    assert (inline_weights(2 * q, k, 8 ** -0.5) - inl).abs().max() > 1e-3   # injective
    # the queries argument picks rows
    assert torch.equal(linear_weights(q, k, queries=[3, 1]), lin[:, [3, 1]])


def test_softmax_weights_are_torchs():
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(3, 7, 16, generator=gen), torch.randn(3, 20, 16, generator=gen)
    eye = torch.eye(20).expand(3, 20, 20)
    ref = F.scaled_dot_product_attention(q, k, eye)         # its weights, row by row
    assert rel_err(softmax_weights(q, k, 16 ** -0.5), ref) < TOL


def test_maps_of_queries_and_their_scaled_copies():
    """The tool's call: per query and its 2q copy, rows sum to 1 (mean over heads and one
    head), the linear row of 2q is that of q, InLine's is not; identity kernel -> ReLU."""
    model = build('InLineSwin')
    cap = capture_attention(model, torch.randn(1, 3, 64, 96), 0, 0)
    h, w = cap.hw
    for head in (None, 0):
        maps = attention_maps(cap, [(0, 0), (0, 0), (h - 1, w - 1)], head=head,
                              query_scales=[1, 2, 1])
        assert maps.linear_kernel == 'relu' and maps.kernel_name == 'identity'
        assert maps.grid == (h, w) and maps.stride == 4 and maps.query_cell(2) == (h - 1, w - 1)
        for method, wts in maps.weights.items():
            assert wts.shape == (3, h * w)
            assert (wts.sum(-1) - 1).abs().max() < TOL, method
        assert torch.allclose(maps.weights['linear'][0], maps.weights['linear'][1])
        assert (maps.weights['inline'][0] - maps.weights['inline'][1]).abs().max() > 1e-9
        assert maps.spread('linear') > 0 and maps.grid_map('inline', 0).shape == (h, w)
    kernels = local_kernels(cap.module, cap.token_mean[0])
    assert torch.allclose(maps.kernel, head_kernel(kernels, cap.num_heads, 0))
    d = cap.module.head_dim
    assert torch.allclose(head_kernel(kernels, cap.num_heads, 0), kernels[:d].mean(0))
    with pytest.raises(ValueError, match='outside'):
        attention_maps(cap, [(h, 0)])
    with pytest.raises(ValueError, match='heads'):
        attention_maps(cap, [(0, 0)], head=cap.num_heads)


def test_a_kernel_phi_is_applied_to_q_and_k(monkeypatch):
    """A block with a kernel (inline_cfg kernel='relu' sets ``kernel`` and ``phi``): the
    InLine and linear weights run on phi(q), phi(k), and InLine's reproduce the global term
    of the formula on them; Softmax stays on the raw projections."""
    model = build('InLinePVT')
    stage, block = first_inline(model)
    _, attn = find_attention(model, stage, block)
    cap = capture_attention(model, torch.randn(1, 3, 64, 64), stage, block)
    monkeypatch.setattr(attn, 'kernel', 'relu', raising=False)
    monkeypatch.setattr(attn, 'phi', torch.relu, raising=False)
    maps = attention_maps(cap, [0, 5])
    tokens = cap.image(0)
    assert maps.kernel_name == maps.linear_kernel == 'relu'
    q, k, v = cap.qkv_heads()
    glob = global_term(q.relu(), k.relu(), v, cap.scale, tokens.index)
    full = inline_weights(tokens.q, tokens.k, cap.scale, phi=torch.relu)
    assert rel_err(full @ tokens.v, glob) < TOL
    assert rel_err(maps.weights['inline'], full[:, [0, 5]].mean(0)) < TOL
    assert rel_err(maps.weights['softmax'],
                   softmax_weights(tokens.q, tokens.k, cap.scale, [0, 5]).mean(0)) < TOL


def test_deit_class_token_is_a_query_and_a_key():
    model = build('InLineDeiT')
    cap = capture_attention(model, torch.randn(1, 3, 64, 96), 0, 3)
    assert cap.num_prefix_tokens == 1 and cap.hw == (4, 6) and cap.path == 'blocks.3.attn'
    family = FAMILIES['InLineDeiT']
    short = family.cls(**{**family.smoke, 'out_indices': (2,)}).eval()
    with pytest.raises(AttentionSiteError, match='was not called.*out_indices'):
        capture_attention(short, torch.randn(1, 3, 64, 96), 0, 3)    # it stops at block 2
    maps = attention_maps(cap, [0, (1, 2)])                 # the class token, a patch
    assert maps.query_cell(0) is None and maps.query_cell(1) == (1, 2)
    assert maps.stride == 16
    for method in maps.weights:
        for row in range(2):
            total = maps.prefix(method, row).sum() + maps.grid_map(method, row).sum()
            assert abs(float(total) - 1) < TOL, method


# ------------------------------------------------------------------ where
def test_sites_of_every_family_and_clear_errors():
    swin = build('InLineSwin')
    sites = {(s.stage, s.block): s for s in attention_sites(swin)}
    assert [k for k, s in sites.items() if s.inline] == [(0, 0), (2, 0)]
    with pytest.raises(AttentionSiteError, match=r'Softmax block.*\(0, 0\), \(2, 0\)'):
        find_attention(swin, 2, 1)
    with pytest.raises(AttentionSiteError, match=r'no block 0 in stage 7.*\(0, 0\), \(2, 0\)'):
        find_attention(swin, 7, 0)
    cswin = build('InLineCSwin')
    path, attn = find_attention(cswin, 0, 0)
    assert path == 'stages.0.blocks.0.attns.0' and attn.lepe is not None
    with pytest.raises(AttentionSiteError, match='branch'):
        find_attention(cswin, 0, 0, branch=1)
    pvt = build('InLinePVT')
    assert find_attention(pvt, 1, 1)[0] == 'stages.1.blocks.1.attn'
    with pytest.raises(AttentionSiteError, match='Softmax'):
        find_attention(pvt, 0, 0)


def test_points_grid_and_preprocessing():
    assert point_to_cell((0, 0), (90, 130), (224, 323), 4, (56, 81)) == (0, 0)
    assert point_to_cell((129.9, 89.9), (90, 130), (224, 323), 4, (56, 81)) == (55, 80)
    with pytest.raises(ValueError, match=r'outside the 130x90 image'):
        point_to_cell((130, 10), (90, 130), (224, 323), 4, (56, 81))
    assert grid_points(2, (100, 200)) == [(50, 25), (150, 25), (50, 75), (150, 75)]
    assert map_stride((224, 323), (56, 81)) == 4 and map_stride((64, 96), (2, 3)) == 32
    assert Preprocess(short_side=224).resized_size((90, 130)) == (224, 324)
    # mmdet's keep-ratio rule for scale (1333, 800): short side 800 unless the long side
    # would pass 1333
    coco = Preprocess(scale=(1333, 800))
    assert coco.resized_size((480, 640)) == (800, 1067)
    assert coco.resized_size((300, 1000)) == (400, 1333)
    assert Preprocess(scale=(512, 256), keep_ratio=False).resized_size((90, 130)) == (256, 512)


def test_preprocessing_read_from_a_detection_config():
    from mmengine.config import Config
    cfg = Config.fromfile(str(ROOT / 'configs' / 'inline_swin' /
                              'mask-rcnn_inline-swin-t_fpn_1x_coco.py'))
    pre = Preprocess.from_config(cfg)
    assert pre.scale == (1333, 800) and pre.keep_ratio and pre.size_divisor == 32
    assert pre.mean == (123.675, 116.28, 103.53)


# ------------------------------------------------------------------ the tool
def _image(path, hw=(90, 130)):
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 255, (*hw, 3), dtype=np.uint8)).save(path)
    return path


def _tool(*args, cwd=ROOT):
    return subprocess.run([sys.executable, str(TOOL), *map(str, args)], capture_output=True,
                          text=True, env=subprocess_env(), cwd=cwd, timeout=120)


def _load_tool():
    return load_script(TOOL)


@pytest.mark.subprocess
def test_attention_map_tool_writes_the_grid(tmp_path):
    image, out = _image(tmp_path / 'img.png'), tmp_path / 'map.png'
    res = _tool('--model', 'InLineSwin', '--arch', 'smoke', '--random-weights', '--image', image,
                '--points', '10,10', '100,60', '--query-scales', '1', '2', '--stage', '2',
                '--head', '1', '--out', out, '--json')
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary['module'] == 'layers.2.blocks.0.attn' and summary['queries'] == 4
    assert summary['linear_kernel'] == 'relu' and summary['grid'] == [14, 21]
    with Image.open(out) as im:
        assert im.size == figure_size(4) == (1200, 4 * 240 + 76)
    # an error: the exit status and the message
    res = _tool('--model', 'InLineSwin', '--arch', 'smoke', '--random-weights', '--image', image,
                '--grid', '2', '--stage', '1', '--out', tmp_path / 'softmax.png')
    assert res.returncode != 0 and 'stage 1 block 0 (layers.1.blocks.0) is a Softmax block' \
        in res.stderr
    assert 'InLine (stage, block) pairs: (0, 0), (2, 0)' in res.stderr
    assert not (tmp_path / 'softmax.png').exists()


def test_attention_map_tool_class_token_and_errors_in_process(tmp_path, capsys):
    tool = _load_tool()
    image, out = _image(tmp_path / 'img.png'), tmp_path / 'map.png'
    # a timm-style name, with the class token as a query
    tool.main(['--model', 'inline_deit_smoke', '--random-weights', '--image', str(image),
               '--grid', '2', '--cls-query', '--block', '5', '--out', str(out), '--json'])
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])['module'] == \
        'blocks.5.attn'
    with Image.open(out) as im:
        assert im.size == figure_size(5)

    def refused(*args):
        with pytest.raises(SystemExit) as e:
            tool.main(['--image', str(image), '--out', str(tmp_path / 'no.png'), *map(str, args)])
        assert not (tmp_path / 'no.png').exists()
        return str(e.value)

    swin = ['--model', 'InLineSwin', '--arch', 'smoke']
    assert 'point (130, 10) is outside the 130x90 image' in refused(
        *swin, '--random-weights', '--points', '10,10', '130,10')
    assert 'X,Y pairs' in refused(*swin, '--random-weights', '--points', '10')
    assert 'no weights: pass --checkpoint' in refused(*swin, '--grid', '2')
    assert 'exclude each other' in refused(*swin, '--grid', '2', '--random-weights',
                                           '--checkpoint', tmp_path / 'any.pth')
    assert 'no class token' in refused(*swin, '--random-weights', '--grid', '2', '--cls-query')
    assert 'unknown backbone' in refused('--model', 'inline_swin_huge', '--random-weights',
                                         '--grid', '2')
    with pytest.raises(SystemExit, match='image not found'):
        tool.main([*swin, '--image', str(tmp_path / 'none.png'), '--random-weights', '--grid', '2'])
    # a checkpoint of another variant: the loader's error
    torch.manual_seed(0)
    fam = FAMILIES['InLineSwin']
    other = fam.cls(**{**fam.smoke, 'embed_dims': 32, 'num_heads': (2, 4, 8, 16)})
    torch.save({'state_dict': {f'backbone.{k}': v for k, v in other.state_dict().items()}},
               tmp_path / 'other.pth')
    assert 'does not fit this InLineSwin' in refused(*swin, '--checkpoint', tmp_path / 'other.pth',
                                                     '--grid', '2')
    # ... and one of this variant (an mm checkpoint, backbone. prefix) is loaded
    torch.manual_seed(3)
    same = fam.cls(**fam.smoke)
    torch.save({'state_dict': {f'backbone.{k}': v for k, v in same.state_dict().items()}},
               tmp_path / 'same.pth')
    tool.main([*swin, '--checkpoint', str(tmp_path / 'same.pth'), '--image', str(image),
               '--grid', '1', '--out', str(out)])
    assert 'wrote' in capsys.readouterr().out


def _documented(prefix):
    """The command of docs/attention_maps.md that starts with ``prefix``, as argv."""
    text = (ROOT / 'docs' / 'attention_maps.md').read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith(prefix))
    return shlex.split(line)


def _replace(argv, option, value):
    i = argv.index(option)
    return argv[:i + 1] + [str(value)] + argv[i + 2:]


@pytest.mark.subprocess
def test_attention_map_tool_on_a_config(tmp_path):
    """The page's command on its config, with random weights in place of the official file:
    the config's test resize (COCO: short side 800, long side <= 1333) and batch padding."""
    argv = _documented('python tools/attention_map.py --config')
    i = argv.index('--checkpoint')
    argv = argv[:i] + ['--random-weights'] + argv[i + 2:]
    argv = _replace(argv, '--image', _image(tmp_path / 'demo.png', (240, 320)))
    argv = _replace(argv, '--out', tmp_path / 'map.png')
    res = subprocess.run([sys.executable, *argv[1:], '--json'], capture_output=True, text=True,
                         env=subprocess_env(), cwd=ROOT, timeout=180)
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    # 240x320 -> 800x1067 (x 10/3), stage 0 at stride 4: 200 x ceil(1067 / 4) tokens
    assert summary['arch'] == 'tiny' and summary['grid'] == [200, 267]
    with Image.open(tmp_path / 'map.png') as im:
        assert im.size == figure_size(4)


@pytest.mark.subprocess
def test_docs_picture_command(tmp_path):
    """The command that made docs/images/attention_map.png, as written (output elsewhere):
    the same figure layout as the shipped picture, small enough to ship."""
    argv = _replace(_documented('python tools/attention_map.py --model'), '--out',
                    tmp_path / 'map.png')
    res = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True,
                         env=subprocess_env(), cwd=ROOT, timeout=180)
    assert res.returncode == 0, res.stderr
    shipped = ROOT / 'docs' / 'images' / 'attention_map.png'
    with Image.open(tmp_path / 'map.png') as new, Image.open(shipped) as old:
        assert new.size == old.size == figure_size(4)
    assert shipped.stat().st_size < 300_000
