"""The InLine models in timm (``inline_mm.timm``), for every family and preset of the
family table: the official classifiers (against the official code's logits and checkpoint
layouts), the ``features_only`` backbones, and, in our own words, the contract timm's
``tests/test_models.py`` checks of every timm model (``tools/dev/run_timm_model_tests.sh``
runs timm's own file)."""
import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

timm = pytest.importorskip('timm')
import inline_mm.timm as inline_timm  # noqa: E402
from inline_mm.models import FAMILIES, CheckpointError  # noqa: E402
from inline_mm.models import classifier  # noqa: E402
from support import load_script  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def test_every_family_and_preset_is_registered():
    expected = {inline_timm.model_name(f.name, p) for f in FAMILIES.values() for p in f.presets}
    assert set(inline_timm.MODEL_NAMES) == expected
    assert 'inline_swin_tiny' in expected
    assert expected <= set(timm.list_models('inline_*'))


@pytest.mark.parametrize('module', [inline_timm, classifier])
def test_only_public_timm_modules_are_imported(module):
    """timm's underscore modules (``timm.models._builder``) change between releases."""
    tree = ast.parse(Path(module.__file__).read_text())
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


def test_pretrained_without_file_asks_the_resolver_for_the_official_one(tmp_path, monkeypatch):
    """No ``file``: the preset's official file by short name; offline with an empty cache
    the resolver's error names it and the manual route."""
    monkeypatch.setenv('INLINE_MM_WEIGHTS', str(tmp_path / 'cache'))
    monkeypatch.setenv('INLINE_MM_OFFLINE', '1')
    monkeypatch.chdir(tmp_path)
    for features_only in (True, False):
        with pytest.raises(CheckpointError, match=r'inline://pvt_t is not on this machine'):
            timm.create_model('inline_pvt_tiny', pretrained=True, features_only=features_only)


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
            classifier = timm.create_model(inline_mm.timm.model_name(name, preset), **f.smoke)
            assert classifier(torch.randn(1, 3, 64, 64)).shape == (1, 1000)
        assert not [m for m in sys.modules if m.split('.')[0] in BLOCKED]
        print('OK')
    ''')
    proc = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip().endswith('OK'), proc.stderr[-3000:]


# ------------------------------------------------------------------ the official classifiers
#: golden case -> (model name, the official architecture of its small model in our arguments)
GOLDEN_CLASSIFIERS = {
    'inline_swin_tiny_224': ('inline_swin_tiny', dict(
        embed_dims=16, depths=(2, 2, 2, 2), num_heads=(1, 2, 4, 8),
        stage_types=('inline', 'inline', 'inline', 'softmax'))),
    'inline_pvt_tiny_224': ('inline_pvt_tiny', dict(
        embed_dims=(16, 32, 80, 128), depths=(1, 1, 1, 1), num_heads=(1, 2, 5, 8))),
    'inline_cswin_tiny_224': ('inline_cswin_tiny', dict(
        embed_dims=16, depths=(1, 2, 2, 1), num_heads=(2, 4, 8, 16))),
    'inline_deit_tiny_224': ('inline_deit_tiny', dict(
        embed_dims=48, depth=4, num_heads=3, pretrain_img_size=224)),
    'inline_deit_tiny_448': ('inline_deit_tiny', dict(
        embed_dims=48, depth=4, num_heads=3, pretrain_img_size=224)),
}


def _golden_classifier(golden, case):
    name, arch = GOLDEN_CLASSIFIERS[case]
    weights = 'inline_deit_tiny_224' if case.startswith('inline_deit') else case
    path, exp = golden(case, weights)
    model = timm.create_model(name, pretrained=True, num_classes=10, drop_path_rate=0.,
                              pretrained_cfg_overlay=dict(file=path), **arch)
    return model, exp


@pytest.mark.parametrize('case', list(GOLDEN_CLASSIFIERS))
def test_classifier_logits_and_intermediates_equal_the_official_model(golden, case):
    """The official classifier's logits (the goldens' ``logits``) and the tokens leaving each
    stage (block) of the official model, to the goldens' tolerance."""
    from conftest import rel_err
    model, exp = _golden_classifier(golden, case)
    assert not model.training
    with torch.no_grad():
        logits = model(exp['input'])
        final, maps = model.forward_intermediates(exp['input'], norm=True)
    assert rel_err(logits, exp['logits']) <= 1e-5
    taps = sorted(k for k in exp if re.fullmatch(r'(stage|block)\d+', k))
    assert len(maps) == len(taps)
    for i, key in enumerate(taps):
        tokens = maps[i].flatten(2).transpose(1, 2)
        ref = exp[key][:, -tokens.shape[1]:]              # InLine-DeiT: without the class token
        if i == len(taps) - 1 and 'final_norm' in exp:      # norm=True: the final norm's output
            ref = exp['final_norm'][:, -tokens.shape[1]:]
        assert rel_err(tokens, ref) <= 1e-5, key
    torch.testing.assert_close(final, model.forward_features(exp['input']), rtol=0, atol=0)


@pytest.mark.parametrize('name', inline_timm.MODEL_NAMES)
def test_official_checkpoint_layout_fills_every_classifier_tensor(name):
    """Every key of the released file (``official_state_dicts.json``) lands in the classifier
    with its shape, and the classifier has no tensor the file does not give."""
    import json
    family, preset = inline_timm._ENTRIES[name]
    release = next(r for r in family.checkpoints if r.arch == preset)
    # every key and shape of the 13 released files (as golden/README.md describes them)
    table = json.loads((ROOT / 'tests/data/official_state_dicts.json').read_text())
    shapes = table[f'inline_{release.weights}']['state_dict']
    with torch.device('meta'):
        model = timm.create_model(name)
        state = {k: torch.empty(v) for k, v in shapes.items()}
        converted = model.convert_checkpoint(state)
    own = model.state_dict()
    assert set(converted) == set(own)
    assert {k: tuple(v.shape) for k, v in converted.items()} == \
        {k: tuple(v.shape) for k, v in own.items()}
    assert model.pretrained_cfg['url'] == release.url
    assert 'head.weight' in own and model.pretrained_cfg['classifier'] == 'head'


def _official_classifier_file(model) -> dict:
    """A state dict in the official layout from one of our classifiers (InLine-DeiT's keys
    are the official ones below ``backbone.``)."""
    return {k[len('backbone.'):] if k.startswith('backbone.') else k: v
            for k, v in model.state_dict().items()}


def test_pretrained_true_loads_the_released_file_from_the_cache(tmp_path, monkeypatch):
    """``pretrained=True`` finds ``inline_deit_t.pth`` in the weights cache (offline), loads
    head and body, and keeps timm's variations: another ``num_classes`` drops the head,
    ``in_chans=1`` sums the stem's RGB filters, ``num_classes=0`` gives pooled features;
    a file with a tensor the model lacks is refused unless ``pretrained_strict=False``."""
    cache = tmp_path / 'cache'
    cache.mkdir()
    monkeypatch.setenv('INLINE_MM_WEIGHTS', str(cache))
    monkeypatch.setenv('INLINE_MM_OFFLINE', '1')
    monkeypatch.chdir(tmp_path)
    source = inline_timm.create_classifier('inline_deit_tiny')
    with torch.no_grad():
        source.head.bias.normal_()
    torch.save({'model': _official_classifier_file(source)}, cache / 'inline_deit_t.pth')
    x = torch.randn(1, 3, 64, 64)

    model = timm.create_model('inline_deit_tiny', pretrained=True)
    with torch.no_grad():
        torch.testing.assert_close(model(x), source(x), rtol=0, atol=0)
        five = timm.create_model('inline_deit_tiny', pretrained=True, num_classes=5)
        assert five(x).shape == (1, 5)
        torch.testing.assert_close(five.forward_features(x), source.forward_features(x),
                                   rtol=0, atol=0)
        gray = timm.create_model('inline_deit_tiny', pretrained=True, in_chans=1)
        torch.testing.assert_close(gray(x[:, :1]), source(x[:, :1].expand(-1, 3, -1, -1)),
                                   rtol=1e-4, atol=1e-4)
        pooled = timm.create_model('inline_deit_tiny', pretrained=True, num_classes=0)
        torch.testing.assert_close(pooled(x), source.forward_head(
            source.forward_features(x), pre_logits=True), rtol=0, atol=0)

    headless = {k: v for k, v in _official_classifier_file(source).items()
                if not k.startswith('head.')}
    torch.save({'model': headless}, tmp_path / 'headless.pth')
    with pytest.raises(RuntimeError, match=r'2 missing \(head\.weight, head\.bias\)'):
        timm.create_model('inline_deit_tiny', pretrained=True,
                          pretrained_cfg_overlay=dict(file=str(tmp_path / 'headless.pth')))
    extra = {'model': {**_official_classifier_file(source), 'head_extra.weight': torch.ones(1)}}
    torch.save(extra, tmp_path / 'extra.pth')
    overlay = dict(file=str(tmp_path / 'extra.pth'))
    with pytest.raises(RuntimeError, match=r'1 unexpected \((backbone\.)?head_extra\.weight\).*'
                                           r'pretrained_strict=False'):
        timm.create_model('inline_deit_tiny', pretrained=True, pretrained_cfg_overlay=overlay)
    loose = timm.create_model('inline_deit_tiny', pretrained=True, pretrained_strict=False,
                              pretrained_cfg_overlay=overlay)
    # a url of the overlay other than the official one is what gets loaded (the resolver
    # takes URLs and paths alike; a path keeps this test off the network)
    by_url = timm.create_model('inline_deit_tiny', pretrained=True, pretrained_cfg_overlay=dict(
        url=str(tmp_path / 'extra.pth')), pretrained_strict=False)
    with torch.no_grad():
        torch.testing.assert_close(loose(x), source(x), rtol=0, atol=0)
        torch.testing.assert_close(by_url(x), source(x), rtol=0, atol=0)


@pytest.mark.parametrize('name', inline_timm.MODEL_NAMES)
def test_pretrained_cfg_is_the_official_evaluation(name):
    """The file's URL, ImageNet mean/std, the training size (InLine-DeiT-S/B: 288/448) and
    the official eval transform (bicubic resize of the square image, 0.875 centre crop)."""
    family, preset = inline_timm._ENTRIES[name]
    cfg = timm.models.get_pretrained_cfg(name).to_dict()
    size = family.presets[preset].get('pretrain_img_size', 224)
    assert cfg['url'] in [r.url for r in family.checkpoints if r.arch == preset]
    assert cfg['input_size'] == (3, size, size) and cfg['num_classes'] == 1000
    assert (cfg['crop_pct'], cfg['crop_mode'], cfg['interpolation']) == \
        (0.875, 'squash', 'bicubic')
    assert cfg['mean'] == timm.data.IMAGENET_DEFAULT_MEAN
    assert cfg['std'] == timm.data.IMAGENET_DEFAULT_STD
    assert name in timm.list_models(pretrained=True)


def _smoke_classifier(family_name, **kw):
    family = FAMILIES[family_name]
    name = inline_timm.model_name(family_name, next(iter(family.presets)))
    return timm.create_model(name, **{**family.smoke, **kw})


@pytest.mark.parametrize('family_name', list(FAMILIES))
def test_classifier_api(family_name):
    """timm's classifier contract: logits, unpooled features of ``num_features`` channels,
    ``pre_logits`` of ``head_hidden_size``, ``reset_classifier(0)`` giving exactly the
    pre-logits and ``(0, '')`` the unpooled features, the same from the constructor, and
    the cfg's ``classifier`` / ``first_conv`` naming parameters (``first_conv`` the stem
    that takes the image)."""
    model = _smoke_classifier(family_name, num_classes=7)
    tokens = FAMILIES[family_name].out_unit == 'block'
    x = torch.randn(2, 3, 64, 96)
    with torch.no_grad():
        logits = model(x)
        feats = model.forward_features(x)
        pre = model.forward_head(feats, pre_logits=True)
        assert logits.shape == (2, 7) and model.num_classes == 7
        assert model.get_classifier() is model.head
        if tokens:          # InLine-DeiT: (B, 1 + H*W, C), the class token first
            assert feats.shape == (2, 1 + 4 * 6, model.num_features)
        else:
            assert feats.shape == (2, model.num_features, 2, 3)
            assert getattr(model, 'output_fmt', 'NCHW') == 'NCHW'
        assert pre.shape == (2, model.head_hidden_size)
        model.reset_classifier(0)
        assert model.num_classes == 0
        torch.testing.assert_close(model(x), pre, rtol=0, atol=0)
        model.reset_classifier(0, '')
        torch.testing.assert_close(model(x), feats, rtol=0, atol=0)
        bare = _smoke_classifier(family_name, num_classes=0, global_pool='').eval()
        assert bare(x).shape == feats.shape
    state = model.state_dict()
    cfg = model.pretrained_cfg
    assert f"{cfg['classifier']}.weight" in _smoke_classifier(family_name).state_dict()
    stem = model.get_submodule(cfg['first_conv'])
    assert isinstance(stem, torch.nn.Conv2d) and stem.in_channels == 3
    assert f"{cfg['first_conv']}.weight" in state
    with pytest.raises(ValueError, match='global_pool'):
        model.reset_classifier(0, 'token' if not tokens else 'max')


@pytest.mark.parametrize('family_name', list(FAMILIES))
def test_classifier_trains_every_parameter_and_checkpointing_keeps_the_output(family_name):
    """timm's backward contract (every parameter gets a gradient) and grad checkpointing
    (same outputs, same gradients)."""
    model = _smoke_classifier(family_name, num_classes=5).train()
    x = torch.randn(2, 3, 64, 64)
    torch.manual_seed(1)
    out = model(x)
    out.mean().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    assert all(g is not None for g in grads.values())
    assert set(grads) == {n for n, _ in model.named_parameters()}
    model.zero_grad()
    model.set_grad_checkpointing()
    assert model.backbone.with_cp
    torch.manual_seed(1)
    out2 = model(x)
    out2.mean().backward()
    torch.testing.assert_close(out2, out, rtol=1e-5, atol=1e-6)
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, grads[n], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize('family_name', list(FAMILIES))
def test_forward_intermediates_and_feature_info(family_name):
    """``forward_intermediates``: one map per ``feature_info`` entry (channels, stride), the
    final features equal to ``forward_features``, ``indices`` as in timm (last n, or
    chosen, negative from the end), NHWC on request; each ``feature_info`` module's output
    is that map's tokens (what timm's hook-based wrappers read); ``features_only`` with
    ``feature_cls='getter'`` returns the same maps."""
    model = _smoke_classifier(family_name).eval()
    info = timm.models.FeatureInfo(model.feature_info, len(model.feature_info))
    x = torch.randn(1, 3, 64, 96)
    seen = {}
    for i, entry in enumerate(model.feature_info):
        model.get_submodule(entry['module']).register_forward_hook(
            lambda m, args, out, i=i: seen.__setitem__(i, out))
    with torch.no_grad():
        final, maps = model.forward_intermediates(x)
        torch.testing.assert_close(final, model.forward_features(x), rtol=0, atol=0)
        assert len(maps) == len(model.feature_info) >= 3
        for i, (m, c, r) in enumerate(zip(maps, info.channels(), info.reduction())):
            assert m.shape == (1, c, 64 // r, 96 // r), i
            tokens = m.flatten(2).transpose(1, 2)
            assert torch.equal(seen[i][:, -tokens.shape[1]:], tokens), i
        last2 = model.forward_intermediates(x, indices=2, intermediates_only=True)
        picked = model.forward_intermediates(x, indices=[0, -1], intermediates_only=True,
                                             output_fmt='NHWC')
        getter = timm.create_model(
            inline_timm.model_name(family_name, next(iter(FAMILIES[family_name].presets))),
            features_only=True, feature_cls='getter', out_indices=(0, 2),
            **FAMILIES[family_name].smoke)
        getter.model.load_state_dict(model.state_dict(), strict=False)   # the head is pruned
        got = getter(x)
    for a, b in zip(last2, maps[-2:]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch.testing.assert_close(picked[0], maps[0].permute(0, 2, 3, 1), rtol=0, atol=0)
    torch.testing.assert_close(picked[1], maps[-1].permute(0, 2, 3, 1), rtol=0, atol=0)
    assert getter.feature_info.channels() == [info.channels()[0], info.channels()[2]]
    for a, b in zip(got, (maps[0], maps[2])):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    with pytest.raises(ValueError, match='indices'):
        model.forward_intermediates(x, indices=[len(maps)])


def test_standard_arguments_reach_the_backbone_and_unknown_ones_are_named():
    family = FAMILIES['InLineSwin']
    model = timm.create_model('inline_swin_tiny', drop_path_rate=0.3, in_chans=1,
                              **{k: v for k, v in family.smoke.items() if k != 'drop_path_rate'})
    rates = [m.drop_prob for m in model.modules() if type(m).__name__ == 'DropPath']
    assert rates and max(rates) == pytest.approx(0.3)
    assert model.backbone.in_channels == 1
    assert model(torch.randn(1, 1, 64, 64)).shape == (1, 1000)
    with pytest.raises(TypeError, match=r"unknown argument\(s\) window_sise"):
        timm.create_model('inline_swin_tiny', window_sise=7)
    with pytest.raises(TypeError, match=r"unknown argument\(s\) window_sise"):
        timm.create_model('inline_swin_tiny', features_only=True, window_sise=7)
    with pytest.raises(TypeError, match='out_indices is for features_only'):
        timm.create_model('inline_swin_tiny', out_indices=(1,))
    with pytest.raises(ValueError, match=r'cache_dir .*INLINE_MM_WEIGHTS'):
        timm.create_model('inline_swin_tiny', cache_dir='/tmp/elsewhere')


def test_classifier_takes_a_black_border_for_image():
    """A classified image is not a padded batch: zero rows at its bottom are image (as in
    the official model), while ``features_only`` keeps the backbone's padding awareness."""
    model = _smoke_classifier('InLineSwin').eval()
    x = torch.randn(1, 3, 64, 64)
    x[..., 48:, :] = 0
    ref = inline_timm.create_classifier('inline_swin_tiny', pad_aware=True,
                                        **FAMILIES['InLineSwin'].smoke).eval()
    ref.load_state_dict(model.state_dict())
    with torch.no_grad():
        assert not torch.allclose(model(x), ref(x))
    assert not model.backbone.pad_aware
    assert timm.create_model('inline_swin_tiny', features_only=True).backbone.pad_aware


def test_timm_test_runner_files_our_models_as_timm_does():
    """tools/dev/run_timm_model_tests.py changes only timm's two selection lists: InLine-DeiT
    joins timm's ViTs (token outputs), our module the models with forward_intermediates."""
    runner = load_script('tools/dev/run_timm_model_tests.py')
    source = "A = 1\nNON_STD_FILTERS = [\n    'vit_*',\n]\nFEAT_INTER_FILTERS = [\n    'deit',\n]\n"
    namespace = {}
    exec(runner.patched(source), namespace)
    assert namespace['NON_STD_FILTERS'] == ['inline_deit_*', 'vit_*']
    assert namespace['FEAT_INTER_FILTERS'] == ['timm', 'deit']
    assert {m.split('.')[0] for m in timm.list_models('inline_*')} == set(inline_timm.MODEL_NAMES)
    assert set(timm.list_models(module='timm')) >= set(inline_timm.MODEL_NAMES)
    with pytest.raises(SystemExit, match='FEAT_INTER_FILTERS not found'):
        runner.patched("NON_STD_FILTERS = [\n]\n")


@pytest.mark.parametrize('name', inline_timm.MODEL_NAMES)
def test_every_released_classifier_runs_at_its_cfg_size(name):
    """Each released layout builds and classifies; its unpooled map has the cfg's
    ``pool_size`` and ``num_features`` channels (InLine-DeiT-S/B at 224 instead of
    288/448, their tables resized, to keep the suite short)."""
    model = timm.create_model(name).eval()
    cfg = model.pretrained_cfg
    size = min(cfg['input_size'][-1], 224)
    with torch.no_grad():
        feats = model.forward_features(torch.randn(1, 3, size, size))
        logits = model.forward_head(feats)
    assert logits.shape == (1, 1000) and torch.isfinite(logits).all()
    if cfg['pool_size'] is not None:
        assert feats.shape == (1, model.num_features, *cfg['pool_size'])
    else:
        assert feats.shape == (1, 1 + (size // 16) ** 2, model.num_features)
