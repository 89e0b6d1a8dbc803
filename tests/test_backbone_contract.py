"""What every InLine backbone must do, tested once over the family table
(``inline_mm.models.FAMILIES``), as timm's test_models.py runs over ``list_models()``.

Each test builds the family's ``smoke`` configuration (every kind of block, CPU-test
size). A new family gets all of these by its table entry; what is particular to a
family (goldens against the official code, parameter counts, its attention's
semantics, official checkpoint files) is in tests/test_inline_<family>.py.
"""
import contextlib
import inspect
import math
import re

import pytest
import torch
from conftest import build_in_each_framework, rel_err

import inline_mm
import inline_mm.models
from inline_mm.models import FAMILIES, CheckpointError, save_converted
from inline_mm.models.base import InLineBackbone
from inline_mm.models.checkpoint import identify_family
from support import ROOT, load_script, smoke_backbone

NAMES = list(FAMILIES)


build = smoke_backbone


def shape_of(family, model, k, i, h, w):
    """Expected shape of output ``k`` (stage or block ``i``) for an ``h x w`` input."""
    s = family.stride(i)
    return (1, model.dims[i], math.ceil(h / s), math.ceil(w / s))


@pytest.fixture(params=NAMES)
def family(request):
    return FAMILIES[request.param]


# ------------------------------------------------------------------ the table itself
def test_every_family_is_importable_by_name():
    """e.g. ``from inline_mm.models import InLineDeiT``. (A family or variant declared once
    is found by everything else: tests/test_declarations.py.)"""
    for package in (inline_mm, inline_mm.models):
        assert {n: getattr(package, n, None) for n in NAMES} == \
            {f.name: f.cls for f in FAMILIES.values()}, package.__name__
        assert set(NAMES) <= set(package.__all__), package.__name__


def test_key_patterns_identify_each_family_and_no_other(family):
    state = build(family).state_dict()
    pairs = [(f.name, f.official_keys) for f in FAMILIES.values()]
    assert identify_family(state, pairs) == family.name
    assert identify_family(state, [p for p in pairs if p[0] != family.name]) is None


def test_presets_build_and_keep_the_declared_minimum(family):
    for arch, preset in family.presets.items():
        assert 'depths' in preset
        with torch.device('meta'):
            model = family.cls(arch=arch)
        assert model.arch_name == arch
        assert model.min_input_size == family.min_input_size
        assert len(model.out_channels) == len(model.out_indices)


# ------------------------------------------------------------------ shapes
@pytest.mark.parametrize('size', [(224, 224), (255, 255), (112, 137), (800, 1216), 'min'])
def test_shapes(family, size):
    model = build(family).eval()
    m = family.min_input_size
    h, w = (m, m + 1) if size == 'min' else size
    with torch.no_grad():
        outs = model(torch.randn(1, 3, h, w))
    assert len(outs) == len(model.out_indices)
    for k, (i, o) in enumerate(zip(model.out_indices, outs)):
        assert o.shape == shape_of(family, model, k, i, h, w), (i, o.shape)
        assert o.is_contiguous()          # mmcv's RoIAlign reads dense NCHW
        assert torch.isfinite(o).all()


@pytest.mark.parametrize('size', [(96, 120), (100, 116)])
def test_batch_independent(family, size):
    model = build(family).eval()
    x = torch.randn(3, 3, *size)
    with torch.no_grad():
        together = model(x)
        alone = [model(x[i:i + 1]) for i in range(3)]
    for i, o in enumerate(together):
        for b in range(3):
            assert torch.allclose(o[b], alone[b][i][0], atol=1e-5, rtol=1e-4)


def test_output_indices_and_norms(family):
    n = build(family).num_stages
    for out_indices in ((1, n - 1), (0, 2)):
        model = build(family, out_indices=out_indices).eval()
        outs = model(torch.randn(1, 3, 64, 64))
        assert [o.shape[1] for o in outs] == [model.dims[i] for i in out_indices]
        assert list(model.out_channels) == [model.dims[i] for i in out_indices]
        if family.output_norms:
            assert all(hasattr(model, f'norm{i}') == (i in out_indices) for i in range(n))


# ------------------------------------------------------------------ training settings
def _parts(model, items):
    modules = [m for m in items if isinstance(m, torch.nn.Module)]
    params = {id(p) for m in modules for p in m.parameters()}
    params |= {id(p) for p in items if isinstance(p, torch.nn.Parameter)}
    return modules, params


@pytest.mark.parametrize('frozen_stages', [0, 2])
def test_frozen_stages(family, frozen_stages):
    model = build(family, frozen_stages=frozen_stages)
    model.train()
    items = list(model._stem_modules())
    for i in range(frozen_stages):
        items += model._stage_modules(i)
        if i in model.out_indices and model._output_norm(i) is not None:
            items.append(model._output_norm(i))
    frozen_modules, frozen_params = _parts(model, items)
    assert frozen_params
    for name, p in model.named_parameters():
        assert p.requires_grad == (id(p) not in frozen_params), name
    frozen_ids = {id(sub) for m in frozen_modules for sub in m.modules()}
    for name, m in model.named_modules():
        if name:
            assert m.training == (id(m) not in frozen_ids), name
    model.train()          # re-applied on every train()
    assert all(not m.training for m in frozen_modules)
    assert all(not p.requires_grad for p in model.parameters() if id(p) in frozen_params)


def test_with_cp_same_outputs_and_grads(family):
    ref = build(family)
    cpm = build(family, with_cp=True)
    cpm.load_state_dict(ref.state_dict())
    x = torch.randn(2, 3, 70, 90)
    outs = [m(x) for m in (ref, cpm)]
    for a, b in zip(*outs):
        assert torch.equal(a, b)
    for o in outs:
        sum(t.square().mean() for t in o).backward()
    for (n, p), (_, q) in zip(ref.named_parameters(), cpm.named_parameters()):
        assert torch.allclose(p.grad, q.grad, rtol=1e-5, atol=1e-7), n


def test_with_cp_per_stage_checkpoints_those_stages_only(family, monkeypatch):
    import inline_mm.models.layers as layers
    model = build(family, with_cp=[1, 1])                  # a list, kept as a sorted tuple
    assert model.with_cp == (1,)
    stages = model._stage_list()
    assert [bool(s.with_cp) for s in stages] == [i == 1 for i in range(len(stages))]
    calls = []
    original = layers.cp.checkpoint
    monkeypatch.setattr(layers.cp, 'checkpoint',
                        lambda block, *a, **k: calls.append(block) or original(block, *a, **k))
    x = torch.randn(1, 3, 64, 64, requires_grad=True)
    sum(o.sum() for o in model(x)).backward()
    blocks_of_1 = {id(m) for m in stages[1].modules()}
    assert calls and all(id(b) in blocks_of_1 for b in calls)
    model.with_cp = True
    assert all(s.with_cp for s in stages)
    for bad in ((len(stages),), ('1',), 1.0, [True]):
        with pytest.raises(ValueError, match='with_cp must be True, False or a list of stage'):
            build(family, with_cp=bad)


def test_bf16_autocast_close_to_fp32(family):
    model = build(family).eval()
    x = torch.randn(1, 3, 96, 128) * 100
    with torch.no_grad():
        ref = model(x)
        with torch.autocast('cpu', dtype=torch.bfloat16):
            low = model(x)
    for a, b in zip(low, ref):
        assert torch.isfinite(a).all()
        assert rel_err(a, b) <= 2e-2


# ------------------------------------------------------------------ arguments and input
def test_invalid_arguments(family):
    n = build(family).num_stages
    cases = [(dict(arch='huge'), f'unknown {family.name} arch'),
             (dict(out_indices=(n,)), 'out_indices'),
             (dict(out_indices=()), 'out_indices'),
             (dict(frozen_stages=n + 1), 'frozen_stages'),
             (dict(frozen_stages=-2), 'frozen_stages')]
    if 'stage_types' in family.smoke:
        types = list(family.smoke['stage_types'])
        depths = family.smoke['depths']
        cases += [
            (dict(stage_types=types[:-1]), f'stage_types has {n - 1} entries'),
            (dict(stage_types=types[:-1] + ['window']), "unknown attention type 'window'"),
            (dict(stage_types=types[:-1] + [('inline',) * (depths[-1] + 1)]),
             f'lists {depths[-1] + 1} block types')]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            build(family, **kwargs)


def _shared():
    """The keyword arguments every family takes (the base's, with their defaults)."""
    return {n: p for n, p in inspect.signature(InLineBackbone.__init__).parameters.items()
            if p.kind is p.KEYWORD_ONLY}


def test_the_signature_shows_the_shared_arguments(family):
    """``inspect.signature`` of each family: its own arguments, then every shared one,
    keyword only, with the default it takes (``drop_path_rate`` and ``out_indices``: the
    family's), no ``**kwargs``; the defaults are what a model built without them has; an
    unknown keyword is a TypeError naming it."""
    cls = family.cls
    params = inspect.signature(cls).parameters
    code = vars(cls)['__init__'].__code__          # what the family's code itself takes
    own = list(code.co_varnames[1:code.co_argcount])
    assert list(params)[:len(own)] == own and 'arch' in own
    assert not any(p.kind is p.VAR_KEYWORD for p in params.values())
    its_own = dict(drop_path_rate=cls.default_drop_path_rate,
                   out_indices=cls.default_out_indices)
    assert set(_shared()) <= set(params) and len(_shared()) == 15
    for arg, base in _shared().items():
        assert params[arg].kind is params[arg].KEYWORD_ONLY, arg
        assert params[arg].default == its_own.get(arg, base.default), arg
    assert cls.arguments() == {n: p.default for n, p in params.items()}
    model = cls(**{k: v for k, v in family.smoke.items() if k not in _shared()})
    assert model.drop_path_rate == params['drop_path_rate'].default
    assert model.out_indices == tuple(params['out_indices'].default or range(model.num_stages))
    assert (model.in_channels, model.pad_aware, model.frozen_stages, model.with_cp) == tuple(
        params[a].default for a in ('in_channels', 'pad_aware', 'frozen_stages', 'with_cp'))
    with pytest.raises(TypeError, match='not_an_argument'):
        cls(**family.smoke, not_an_argument=1)


def test_bad_input_is_explained(family):
    model = build(family)
    m = family.min_input_size
    for shape, message in [((1, 3, m - 1, 64), 'smaller than its total stride'),
                           ((1, 3, 64, m - 1), 'smaller than its total stride'),
                           ((1, 1, 64, 64), '3-channel input but got 1'),
                           ((1, 4, 64, 64), 'grayscale/RGBA'),
                           ((3, 64, 64), r'\(B, C, H, W\)')]:
        with pytest.raises(ValueError, match=message):
            model(torch.randn(*shape))


def test_registered_in_both_frameworks(family):
    for model in build_in_each_framework(dict(type=family.name, **family.smoke)):
        assert type(model) is family.cls


# ------------------------------------------------------------------ checkpoints
def _load(family, path, **kw):
    model = build(family, init_cfg=dict(type='Pretrained', checkpoint=str(path)), **kw)
    model.init_weights()
    return model


def test_loads_every_converted_layout(family, tmp_path):
    """A state dict, an OpenMMLab checkpoint (``backbone.`` prefix, other modules, under
    ``state_dict``), a ``{'model': ...}`` file, a DDP ``module.`` prefix, a converted
    ``.safetensors``, and an EMA entry picked by ``checkpoint_key``."""
    src = build(family)
    sd = src.state_dict()
    paths = {name: tmp_path / f'{name}.pth' for name in ('plain', 'mm', 'model', 'ddp', 'ema')}
    torch.save(sd, paths['plain'])
    mm = {f'backbone.{k}': v for k, v in sd.items()}
    mm['neck.fpn.weight'] = torch.zeros(3)
    torch.save({'meta': {}, 'state_dict': mm}, paths['mm'])
    torch.save({'model': sd}, paths['model'])
    torch.save({f'module.{k}': v for k, v in sd.items()}, paths['ddp'])
    torch.save({'model': {k: v + 1 for k, v in sd.items()}, 'state_dict_ema': sd}, paths['ema'])
    paths['converted'] = tmp_path / 'converted.safetensors'
    save_converted(sd, str(paths['converted']))
    for name, path in paths.items():
        key = dict(checkpoint_key='state_dict_ema') if name == 'ema' else {}
        model = build(family, init_cfg=dict(type='Pretrained', checkpoint=str(path), **key))
        model.init_weights()
        got = model.state_dict()
        for k, v in sd.items():
            assert torch.equal(got[k], v), (name, k)


def test_conversion_is_idempotent_on_its_own_layout(family):
    model = build(family)
    sd = model.state_dict()
    once = model.convert_checkpoint(sd)
    twice = model.convert_checkpoint(once)
    assert once.keys() == twice.keys() == sd.keys()
    assert all(torch.equal(once[k], twice[k]) and torch.equal(once[k], sd[k]) for k in sd)


@pytest.mark.parametrize('name,other', [(a, b) for a in NAMES for b in NAMES if a != b])
def test_checkpoint_of_another_family_is_refused(name, other, tmp_path):
    path = tmp_path / 'other.pth'
    torch.save({'model': build(FAMILIES[other]).state_dict()}, path)
    with pytest.raises(CheckpointError, match=f'checkpoint of {other}, not of {name}'):
        _load(FAMILIES[name], path)


def _deeper(smoke: dict) -> dict:
    """The smoke configuration with one more block (in a stage of a single type)."""
    if 'depths' in smoke:
        depths, types = list(smoke['depths']), smoke.get('stage_types')
        i = next(i for i in range(len(depths)) if types is None or isinstance(types[i], str))
        depths[i] += 1
        return dict(depths=tuple(depths))
    return dict(depth=smoke['depth'] + 1)


def _wider(smoke: dict) -> dict:
    dims = smoke['embed_dims']
    return dict(embed_dims=dims * 2 if isinstance(dims, int) else tuple(2 * d for d in dims))


def test_other_variants_are_refused(family, tmp_path):
    """A deeper variant of the same widths would fill every tensor (and a shallower
    model would silently drop blocks): its depths give it away; a wider one has other
    shapes everywhere; a state dict of no InLine model matches too little."""
    deeper = _deeper(family.smoke)
    small_model, deep_model = build(family), build(family, **deeper)
    small, deep = tmp_path / 'small.pth', tmp_path / 'deep.pth'
    torch.save({'model': small_model.state_dict()}, small)
    torch.save({'model': deep_model.state_dict()}, deep)
    d_small = re.escape(str(tuple(small_model.depths)))
    d_deep = re.escape(str(tuple(deep_model.depths)))
    with pytest.raises(CheckpointError, match=f'depths {d_deep}.*has depths {d_small}: it is '
                                              'another variant'):
        _load(family, deep)
    with pytest.raises(CheckpointError, match=f'depths {d_small}.*has depths {d_deep}: it is '
                                              'another variant'):
        _load(family, small, **deeper)
    with pytest.raises(CheckpointError, match='other shapes.*another variant'):
        _load(family, small, **_wider(family.smoke))
    unknown = tmp_path / 'unknown.pth'
    torch.save({'fc.weight': torch.zeros(2, 2), 'fc.bias': torch.zeros(2)}, unknown)
    with pytest.raises(CheckpointError, match='provides only 0 of'):
        _load(family, unknown)


def test_missing_checkpoint_names_the_path(family, tmp_path):
    model = build(family, init_cfg=dict(type='Pretrained', checkpoint=str(tmp_path / 'nope.pth')))
    with pytest.raises(FileNotFoundError, match='nope.pth'):
        model.init_weights()


def test_file_that_is_no_checkpoint_is_named(family, tmp_path):
    page = tmp_path / 'weights.pth'          # what a download that hit a login page saves
    page.write_text('<!DOCTYPE html><html><head><title>404 Not Found</title></head></html>')
    model = build(family, init_cfg=dict(type='Pretrained', checkpoint=str(page)))
    with pytest.raises(CheckpointError, match="weights.pth is not a PyTorch checkpoint: it is "
                                              "an HTML page titled '404 Not Found'") as e:
        model.init_weights()
    assert 'weights_only' not in str(e.value)


def test_every_shipped_config_builds_the_recorded_state_dict():
    """Every recipe config's backbone has the state-dict keys and shapes recorded in
    tests/data/backbone_state_keys.json (tools/dev/make_backbone_keys.py; recorded from the
    models before the constructors took their shared arguments from the base; the bf16 and FSDP
    recipes, added after, and the demo config, whose outputs changed on purpose (its FPN
    starts at stride 8), from the models that shipped them): checkpoints written by one
    version load in the next."""
    import json
    tool = load_script('tools/dev/make_backbone_keys.py')
    shipped_configs, backbone_state, digest = tool.shipped_configs, tool.backbone_state, tool.digest
    recorded = json.loads((ROOT / 'tests' / 'data' / 'backbone_state_keys.json').read_text())
    classes = tool.family_classes()
    built = {str(c.relative_to(ROOT / 'configs')): digest(backbone_state(c, classes))
             for c in shipped_configs()}
    assert built.keys() == recorded.keys(), set(built) ^ set(recorded)
    changed = [name for name in built if built[name] != recorded[name]]
    assert not changed, changed


def test_the_same_code_runs_whoever_watches(family):
    """The ops a forward dispatches, and its outputs to the bit, are the same with no
    observer, a global forward hook, forward hooks on every module, the profiler and a
    FLOP counter (a dispatch mode): the path is chosen from the configuration only."""
    from torch.utils.flop_counter import FlopCounterMode

    from benchmarks.launches import OpCounter
    model = build(family, seed=0).eval()
    x = torch.randn(2, 3, 64, 96)
    x[1, :, 40:], x[1, :, :, 70:] = 0, 0                       # a padded batch

    @contextlib.contextmanager
    def hooked(*registers):
        handles = [register(lambda *a: None) for register in registers]
        try:
            yield
        finally:
            for h in handles:
                h.remove()

    def global_hook():
        from torch.nn.modules import module
        return hooked(module.register_module_forward_hook,
                      module.register_module_forward_pre_hook)

    def every_module():
        return hooked(*[r for m in model.modules()
                        for r in (m.register_forward_hook, m.register_forward_pre_hook)])

    watchers = {'nobody': contextlib.nullcontext, 'a global hook': global_hook,
                'hooks on every module': every_module, 'the profiler': torch.profiler.profile,
                'a FLOP counter': lambda: FlopCounterMode(display=False)}
    seen = {}
    for name, watcher in watchers.items():
        with torch.no_grad(), watcher(), OpCounter(record=True) as ops:
            outs = model(x)
        seen[name] = ([op.name for op in ops.seen], outs)
    ops0, outs0 = seen.pop('nobody')
    for name, (ops, outs) in seen.items():
        assert ops == ops0, name
        assert all(torch.equal(a, b) for a, b in zip(outs, outs0)), name
