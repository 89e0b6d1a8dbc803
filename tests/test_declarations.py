"""A variant, or a whole family, is declared once (``register_variant`` /
``register_family`` with ``Variant``s, as each family's file does at its end) and everything
else follows from it: the backbone's ``arch``, mmdet's and mmseg's ``MODELS``,
``FAMILIES``, the weights' short names and their command line, the timm names
(``timm.list_models`` / ``timm.create_model``, pretrained cfg, first conv) and the
attention maps' model names. Each test takes its toy declaration away again afterwards.
"""
import contextlib
import copy
import io

import pytest
import timm
import torch
from timm.models import _registry as timm_registry

import inline_mm.timm as inline_timm
from inline_mm.visualization.attention_maps import build_backbone
from inline_mm.cli import weights as weights_cli
from inline_mm.models import REGISTERED_IN, FAMILIES, InLinePVT, InLineSwin, weights
from inline_mm.models.families import Variant, get_family, register_family, register_variant
from inline_mm.models.registry import framework_registry

TOY_SWIN = Variant('toy', dict(embed_dims=16, depths=(1, 1, 1, 1), num_heads=(1, 2, 4, 8),
                               stage_types=('inline', 'softmax', 'inline', 'softmax')),
                   weights='swin_toy', url='https://example.invalid/files/toy_swin.pth')


class InLineToy(InLinePVT):
    """A family made for these tests: InLine-PVT's blocks under a name of its own."""

    official_keys = (r'^toy_marker$',)


TOY_FAMILY = dict(convert=lambda state: state, strides=(4, 8, 16, 32),
                  first_conv='stages.0.patch_embed.proj',
                  smoke=dict(embed_dims=(32, 32, 48, 64), depths=(1, 1, 1, 1),
                             num_heads=(1, 2, 3, 4), mlp_ratios=(2, 2, 2, 2)))
TOY_FAMILY_VARIANT = Variant('tiny', dict(embed_dims=(32, 32, 48, 64), depths=(1, 2, 1, 1),
                                          num_heads=(1, 2, 3, 4), mlp_ratios=(2, 2, 2, 2),
                                          stage_types=('inline',) * 4),
                             weights='toy_t', url='https://example.invalid/files/toy_t.pth')

#: timm offers no way to unregister a model: these are what its register_model fills
_TIMM_STORES = ('_model_entrypoints', '_model_to_module', '_module_to_models',
                '_model_has_pretrained', '_model_default_cfgs', '_model_pretrained_cfgs',
                '_model_with_tags')


def _listed():
    """What the declarations show to the world."""
    return (list(FAMILIES), {n: list(f.presets) for n, f in FAMILIES.items()},
            list(weights.releases()), inline_timm.MODEL_NAMES, timm.list_models('inline_*'),
            [sorted(framework_registry(fw).module_dict) for fw in REGISTERED_IN])


@pytest.fixture
def undeclare():
    """Puts back every store a declaration writes to, and checks nothing of it is left."""
    stores = [FAMILIES, vars(inline_timm), inline_timm._ENTRIES, inline_timm.default_cfgs,
              *(getattr(timm_registry, name) for name in _TIMM_STORES),
              *(framework_registry(fw).module_dict for fw in REGISTERED_IN)]
    for family in FAMILIES.values():
        stores += [family.variants, family.cls.presets]
    saved = [copy.copy(s) if isinstance(s, set) else
             {k: copy.copy(v) if isinstance(v, (set, list)) else v for k, v in s.items()}
             for s in stores]
    before = _listed()
    yield
    for store, old in zip(stores, saved):
        if isinstance(store, set):
            store.clear()
            store.update(old)
            continue
        for key in set(store) - set(old):
            del store[key]
        store.update(old)
    assert _listed() == before


def _found_everywhere(family_name: str, variant: Variant):
    family = get_family(family_name)
    timm_name = inline_timm.model_name(family_name, variant.arch)
    # the table and the backbone's arch
    assert family.variants[variant.arch] is variant and variant in family.checkpoints
    assert family.presets[variant.arch] == variant.model_args
    with torch.device('meta'):
        assert family.cls(arch=variant.arch).depths == variant.model_args['depths']
    # mmdet's and mmseg's MODELS
    for fw in REGISTERED_IN:
        from mmengine.registry import DefaultScope
        with DefaultScope.overwrite_default_scope(fw):
            built = framework_registry(fw).build(dict(type=family_name, arch=variant.arch))
        assert type(built) is family.cls and built.arch_name == variant.arch
    # the weights' short names, in the resolver and its command line
    t = weights.target(f'inline://{variant.weights}')
    assert (t.url, t.file, t.family, t.release) == \
        (variant.url, f'inline_{variant.weights}.pth', family, variant)
    assert weights.target(variant.url).release is variant
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert weights_cli.main(['list']) == 0
    rows = {line.split()[0]: line.split()[1:3] for line in out.getvalue().splitlines()
            if line.startswith('inline://')}
    assert rows[f'inline://{variant.weights}'] == [family_name, variant.arch]
    # timm
    assert timm_name in timm.list_models('inline_*') and timm_name in inline_timm.MODEL_NAMES
    model = timm.create_model(timm_name, num_classes=3)
    assert type(model.backbone) is family.cls and model.backbone.arch_name == variant.arch
    assert model(torch.randn(1, 3, 64, 64)).shape == (1, 3)
    cfg = timm.models.get_pretrained_cfg(timm_name)
    assert (cfg.url, cfg.first_conv) == (variant.url, f'backbone.{family.first_conv}')
    features = timm.create_model(timm_name, features_only=True)
    assert features.feature_info.reduction() == list(family.strides)
    # the attention maps' model names
    backbone, _ = build_backbone(model=timm_name, random_weights=True)
    assert type(backbone) is family.cls and backbone.arch_name == variant.arch


def test_a_variant_declared_once_is_found_everywhere(undeclare):
    assert 'toy' not in FAMILIES['InLineSwin'].variants
    register_variant(InLineSwin, TOY_SWIN)
    _found_everywhere('InLineSwin', TOY_SWIN)


def test_a_family_declared_once_is_found_everywhere(undeclare):
    family = register_family(InLineToy, variants=[TOY_FAMILY_VARIANT], **TOY_FAMILY)
    assert FAMILIES['InLineToy'] is family and list(FAMILIES)[-1] == 'InLineToy'
    assert family.smoke == TOY_FAMILY['smoke'] and family.stride(2) == 16
    _found_everywhere('InLineToy', TOY_FAMILY_VARIANT)
    # the attention maps also take the family by its name, with its smoke model
    backbone, _ = build_backbone(model='InLineToy', arch='smoke', random_weights=True)
    assert backbone.depths == (1, 1, 1, 1)


def test_a_declaration_that_clashes_is_refused(undeclare):
    with pytest.raises(ValueError, match="variant 'tiny'"):
        register_variant(InLineSwin, Variant('tiny', dict(depths=(1, 1, 1, 1))))
    with pytest.raises(ValueError, match="file 'pvt_t'"):
        register_variant(InLineSwin, Variant('other', TOY_SWIN.model_args, weights='pvt_t'))
    with pytest.raises(ValueError, match='already a declared family'):
        register_family(InLineSwin, **TOY_FAMILY)
    with pytest.raises(TypeError, match='declare official_keys'):
        register_family(type('InLineNoKeys', (InLinePVT,), {}), **TOY_FAMILY)
    with pytest.raises(KeyError, match='not an InLine backbone'):
        register_variant(type('InLineUndeclared', (InLinePVT,), {'official_keys': ()}), TOY_SWIN)
