"""What users of timm and mmdet expect of a backbone: ``feature_info``, ``no_weight_decay()``
(and the configs' ``custom_keys`` that follow it), checkpoints of another Swin window size,
timm's position-table resampler, norm and activation layers from config dicts."""
import math

import pytest
import torch
import torch.nn as nn
from mmengine.optim import DefaultOptimWrapperConstructor

from inline_mm.models import FAMILIES, InLineClassifier

FAMILY_NAMES = list(FAMILIES)


@pytest.mark.parametrize('name', FAMILY_NAMES)
def test_feature_info_describes_each_output(name):
    """Channels and stride of every output as the forward gives them (a non-square size
    that no stride divides), and the module it names returns that output."""
    family = FAMILIES[name]
    model = family.cls(**family.smoke).eval()
    info = model.feature_info
    assert [i['num_chs'] for i in info] == list(model.out_channels)
    assert [i['reduction'] for i in info] == [family.stride(i) for i in model.out_indices]
    seen = {}
    for k, entry in enumerate(info):
        model.get_submodule(entry['module']).register_forward_hook(
            lambda module, args, out, k=k: seen.__setitem__(k, out))
    h, w = 72, 104
    with torch.no_grad():
        outs = model(torch.randn(1, 3, h, w))
    for k, (entry, out) in enumerate(zip(info, outs)):
        r = entry['reduction']
        assert out.shape[1:] == (entry['num_chs'], math.ceil(h / r), math.ceil(w / r)), entry
        tokens = out.flatten(2).transpose(1, 2)
        assert torch.equal(seen[k][:, -tokens.shape[1]:], tokens), entry


def _decay_mults(model: nn.Module, custom_keys: dict) -> dict:
    """Parameter name -> weight decay, as mmengine's optimiser constructor sets it
    (``custom_keys`` matched as the configs' are: the longest key in the name wins)."""
    ctor = DefaultOptimWrapperConstructor(
        dict(type='OptimWrapper', optimizer=dict(type='AdamW', lr=1e-4, weight_decay=1.)),
        dict(custom_keys=custom_keys))
    groups = []
    ctor.add_params(groups, model)
    names = {id(p): n for n, p in model.named_parameters()}
    return {names[id(p)]: g.get('weight_decay', 1.) for g in groups for p in g['params']}


@pytest.mark.parametrize('name', FAMILY_NAMES)
def test_no_weight_decay_keys_select_exactly_no_weight_decay(name):
    """In every preset (built on the meta device), the keys the configs give
    ``decay_mult=0.`` (the shipped configs' ``custom_keys`` equal them: config_spec.NO_DECAY)
    exempt exactly the parameters of ``no_weight_decay()``: every normalisation layer's,
    and the family's position tables; nothing else (a parameter with 'norm' in its name
    that is no norm would show here)."""
    family = FAMILIES[name]
    keys = family.cls.no_weight_decay_keys
    for arch in family.presets:
        with torch.device('meta'):
            wrapper = nn.Module()
            wrapper.backbone = family.cls(arch=arch)
        backbone = wrapper.backbone
        no_decay = backbone.no_weight_decay()
        norms = {f'{m}.{p}' for m, mod in backbone.named_modules()
                 if isinstance(mod, nn.LayerNorm) for p, _ in mod.named_parameters()}
        assert norms and norms <= no_decay
        for key in keys:
            assert any(key in n for n in no_decay), (arch, key)
        decay = _decay_mults(wrapper, {k: dict(decay_mult=0.) for k in keys})
        exempt = {n[len('backbone.'):] for n, wd in decay.items() if wd == 0.}
        assert exempt == no_decay, (arch, sorted(exempt ^ no_decay)[:5])
        assert no_decay < {n for n, _ in backbone.named_parameters()}


def test_timm_classifier_takes_the_backbones_no_weight_decay():
    family = FAMILIES['InLineDeiT']
    model = InLineClassifier(
        family.cls(**dict(family.smoke, out_indices=(11,))), family, num_classes=3)
    assert model.no_weight_decay() == {f'backbone.{n}' for n in
                                       model.backbone.no_weight_decay()}
    assert {'backbone.pos_embed', 'backbone.cls_token', 'backbone.norm.weight'} <= \
        model.no_weight_decay()


def _bicubic(grid, size: int):
    """Bicubic resize of a square 2-D array written out (Keys' kernel, a = -0.75, pixel
    centres at half-integers, edge samples repeated): independent of ``F.interpolate``."""
    import numpy as np

    def kernel(t):
        t, a = abs(t), -0.75
        if t <= 1:
            return (a + 2) * t ** 3 - (a + 3) * t ** 2 + 1
        return a * t ** 3 - 5 * a * t ** 2 + 8 * a * t - 4 * a if t < 2 else 0.

    n = grid.shape[0]
    m = np.zeros((size, n))
    for i in range(size):
        x = (i + 0.5) * n / size - 0.5
        for k in range(math.floor(x) - 1, math.floor(x) + 3):
            m[i, min(max(k, 0), n - 1)] += kernel(x - k)
    return m @ grid @ m.T


@pytest.mark.parametrize('src,dst', [(7, 12), (12, 7)])
def test_swin_checkpoint_of_another_window_size_loads_resized(src, dst, tmp_path,
                                                              monkeypatch):
    """A checkpoint made at window ``src`` (official layout: ``relative_position_index``
    buffers and ``attn_mask`` in it) loads into a model at window ``dst``: each table
    resized bicubically, the index buffers dropped, one log line naming the sizes."""
    import inline_mm.models.inline_swin as swin
    family = FAMILIES['InLineSwin']
    made = family.cls(**dict(family.smoke, window_size=src))
    state = made.state_dict()
    tables = [k for k in state if k.endswith('relative_position_bias_table')]
    assert tables and all(state[k].shape[0] == (2 * src - 1) ** 2 for k in tables)
    for k in tables:
        state[k.replace('bias_table', 'index')] = torch.zeros(src ** 2, src ** 2,
                                                              dtype=torch.long)
    torch.save({'model': state}, tmp_path / 'ckpt.pth')
    logged = []
    monkeypatch.setattr(swin, 'print_log', lambda msg, **kw: logged.append(msg))
    model = family.cls(**dict(family.smoke, window_size=dst),
                       init_cfg=dict(type='Pretrained', checkpoint=str(tmp_path / 'ckpt.pth')))
    model.init_weights()
    s, d = 2 * src - 1, 2 * dst - 1
    assert logged == [f'InLineSwin: {len(tables)} relative position bias tables of window '
                      f'{src} ({s}x{s} offsets) resized to window {dst} ({d}x{d}), bicubic']
    loaded = model.state_dict()
    for k in tables:
        table = state[k].double().numpy()                         # (s * s, heads)
        want = [_bicubic(table[:, h].reshape(s, s), d).reshape(-1)
                for h in range(table.shape[1])]
        got = loaded[k].double().numpy()
        assert got.shape == (d * d, table.shape[1])
        for h, w in enumerate(want):
            assert abs(got[:, h] - w).max() < 1e-6, (k, h)
    assert not any('relative_position_index' in k for k in loaded)
    with torch.no_grad():
        assert model(torch.randn(1, 3, 96, 80))[-1].shape[-2:] == (3, 3)


def test_swin_resize_keeps_a_table_of_the_same_window():
    from inline_mm.models.inline_swin import resize_relative_position_bias_table
    table = torch.randn(13 * 13, 3)
    assert resize_relative_position_bias_table(table, 13) is table
    with pytest.raises(ValueError, match='no square grid'):
        resize_relative_position_bias_table(torch.randn(12, 3), 13)


def _norms(model):
    return [m for m in model.modules() if isinstance(m, nn.LayerNorm)]


@pytest.mark.parametrize('name', FAMILY_NAMES)
def test_norm_and_act_from_config_dicts(name):
    """``norm_cfg`` sets every LayerNorm (``dict(type='LN')`` alone keeps the released
    eps at each place), ``act_cfg`` the MLPs' activation; the InLine local-kernel
    predictor keeps its GELU."""
    family = FAMILIES[name]
    plain = family.cls(**family.smoke)
    same = family.cls(**family.smoke, norm_cfg=dict(type='LN'), act_cfg=dict(type='GELU'))
    assert [n.eps for n in _norms(same)] == [n.eps for n in _norms(plain)]
    assert [type(m) for m in same.modules()] == [type(m) for m in plain.modules()]
    model = family.cls(**family.smoke, norm_cfg=dict(type='LN', eps=1e-3, requires_grad=False),
                       act_cfg=dict(type='ReLU'))
    assert len(_norms(model)) == len(_norms(plain))
    assert all(n.eps == 1e-3 and not n.weight.requires_grad for n in _norms(model))
    acts = [type(m.act) for m in model.modules() if hasattr(m, 'fc1')]   # timm Mlp
    assert acts and set(acts) == {nn.ReLU}
    assert any(isinstance(m, nn.GELU) for m in model.modules()) == \
        any(isinstance(m, nn.GELU) for n, m in plain.named_modules() if 'mlp' not in n)
    model.load_state_dict(plain.state_dict())          # the same parameters
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        assert not torch.allclose(model(x)[-1], plain(x)[-1])


def test_unknown_norm_or_act_is_refused_clearly():
    family = FAMILIES['InLineSwin']
    with pytest.raises(ValueError, match=r"norm_cfg type 'BN' is not supported by the InLine "
                                         r"backbones: choose one of LN"):
        family.cls(**family.smoke, norm_cfg=dict(type='BN'))
    with pytest.raises(ValueError, match=r"act_cfg type 'Gelu' is not supported.*GELU"):
        family.cls(**family.smoke, act_cfg=dict(type='Gelu'))
    with pytest.raises(ValueError, match='norm_cfg: LayerNorm takes no momentum; its options'):
        family.cls(**family.smoke, norm_cfg=dict(type='LN', momentum=0.1))
    with pytest.raises(ValueError, match='must be a dict with a type'):
        family.cls(**family.smoke, act_cfg='GELU')


def test_norm_and_act_types_are_known_to_config_checks():
    """The names are mmcv's: ``inline_mm.apis.config`` (and mmdet) know them."""
    from mmengine.config import Config

    from inline_mm.apis.config import unknown_types
    from inline_mm.models.norm_act import ACT_LAYERS, NORM_LAYERS
    for norm in NORM_LAYERS:
        for act in ACT_LAYERS:
            cfg = Config(dict(model=dict(type='MaskRCNN', backbone=dict(
                type='InLineSwin', norm_cfg=dict(type=norm), act_cfg=dict(type=act)))))
            assert unknown_types(cfg, 'mmdet') == [], (norm, act)
