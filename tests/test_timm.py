"""The InLine backbones as timm ``features_only`` models (``inline_mm.timm``), for every
family and preset of the family table."""
import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

timm = pytest.importorskip('timm')
import inline_mm.timm as inline_timm  # noqa: E402
from inline_mm.models import FAMILIES  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def test_every_family_and_preset_is_registered():
    expected = {inline_timm.model_name(f.name, p) for f in FAMILIES.values() for p in f.presets}
    assert set(inline_timm.MODEL_NAMES) == expected
    assert 'inline_swin_tiny' in expected
    assert expected <= set(timm.list_models('inline_*'))


def test_only_public_timm_modules_are_imported():
    """timm's underscore modules (``timm.models._builder``) change between releases."""
    tree = ast.parse(Path(inline_timm.__file__).read_text())
    modules = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    modules += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    timm_modules = [m for m in modules if m and m.split('.')[0] == 'timm']
    assert timm_modules
    assert not [m for m in timm_modules if any(p.startswith('_') for p in m.split('.'))]


@pytest.mark.parametrize('name', inline_timm.MODEL_NAMES)
def test_feature_info_of_every_variant(name):
    family, preset = inline_timm._ENTRIES[name]
    with torch.device('meta'):
        model = timm.create_model(name, features_only=True)
    backbone = model.backbone
    assert backbone.arch_name == preset
    assert model.feature_info.channels() == list(backbone.out_channels)
    assert model.feature_info.reduction() == [family.stride(i) for i in backbone.out_indices]
    # every stage's entry names a module of the model (timm's hook wrappers look it up)
    modules = [info['module'] for info in model.feature_info.info]
    assert len(modules) == backbone.num_stages
    for name in modules:
        model.get_submodule(name)


@pytest.mark.parametrize('family_name', list(FAMILIES))
def test_feature_info_names_the_module_that_gives_each_output(family_name):
    """The module a ``feature_info`` entry names returns that output: as tokens (B, HW, C),
    after InLine-DeiT's class token, at a non-square size."""
    family = FAMILIES[family_name]
    model = inline_timm.create_backbone(
        inline_timm.model_name(family_name, next(iter(family.presets))), **family.smoke)
    seen = {}
    for i, info in enumerate(model.feature_info.info):
        model.get_submodule(info['module']).register_forward_hook(
            lambda module, args, out, i=i: seen.__setitem__(i, out))
    with torch.no_grad():
        feats = model(torch.randn(1, 3, 64, 80))
    assert len(feats) == len(model.backbone.out_indices)
    for i, feat in zip(model.backbone.out_indices, feats):
        tokens = feat.flatten(2).transpose(1, 2)
        assert torch.equal(seen[i][:, -tokens.shape[1]:], tokens), i


@pytest.mark.parametrize('family_name', list(FAMILIES))
def test_timm_features_equal_openmmlab_backbone(family_name, tmp_path, save_with_yacs_config):
    from conftest import build_in_each_framework
    family = FAMILIES[family_name]
    preset = next(iter(family.presets))
    source = family.cls(**family.smoke)
    source.init_weights()
    state = source.state_dict()
    ema = {k: v + 1 if v.is_floating_point() else v for k, v in state.items()}
    path = tmp_path / 'official_like.pth'
    # (the official training script also pickled its yacs config, which timm's
    # weights-only loading refuses)
    save_with_yacs_config(path, {'model': state, 'state_dict_ema': ema},
                          {'MODEL': {'TYPE': 'inline'}})

    model = timm.create_model(inline_timm.model_name(family_name, preset), pretrained=True,
                              features_only=True, pretrained_cfg_overlay=dict(file=str(path)),
                              **family.smoke)
    cfg = dict(type=family_name, **family.smoke,
               init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    mm = build_in_each_framework(cfg)[0]
    mm.init_weights()
    mm.eval()
    x = torch.randn(2, 3, 64, 96)
    with torch.no_grad():
        got, ref, plain = model(x), mm(x), source.eval()(x)
    assert isinstance(got, list) and len(got) == len(ref)
    for g, r, p in zip(got, ref, plain):
        torch.testing.assert_close(g, r, rtol=0, atol=0)
        torch.testing.assert_close(g, p, rtol=0, atol=0)    # 'model', not the EMA weights
    assert model.feature_info.channels() == [o.shape[1] for o in got]
    assert model.feature_info.reduction() == [96 // o.shape[-1] for o in got]


def test_pretrained_without_file_says_what_to_pass():
    with pytest.raises(ValueError, match='pretrained_cfg_overlay=dict\\(file='):
        timm.create_model('inline_pvt_tiny', pretrained=True, features_only=True)


@pytest.mark.subprocess
def test_timm_entry_points_need_no_openmmlab():
    code = textwrap.dedent('''
        import importlib.abc, sys
        BLOCKED = ('mmcv', 'mmdet', 'mmseg', 'mmengine')

        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split('.')[0] in BLOCKED:
                    raise ModuleNotFoundError(f'No module named {name!r}', name=name)

        sys.meta_path.insert(0, Block())
        import timm, torch
        import inline_mm.timm
        from inline_mm.models import FAMILIES
        for name, f in FAMILIES.items():
            preset = next(iter(f.presets))
            m = timm.create_model(inline_mm.timm.model_name(name, preset), features_only=True,
                                  **f.smoke)
            outs = m(torch.randn(1, 3, 64, 64))
            assert len(outs) == len(m.feature_info.channels())
        assert not [m for m in sys.modules if m.split('.')[0] in BLOCKED]
        print('OK')
    ''')
    proc = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip().endswith('OK'), proc.stderr[-3000:]
