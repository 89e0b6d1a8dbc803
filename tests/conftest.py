import functools
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

import inline_mm.engine
from inline_mm.models import FAMILIES
# The tiny models live in support.py (reliability_support.py needs them without conftest).
from support import (SEG_SIZE, out_channels, shrink_backbone, shrink_detector,  # noqa: F401
                     shrink_segmentor, write_tiny_config)

# No test downloads: a shipped config's 'inline://...' checkpoint that a test forgets to
# replace fails (naming the file) instead of reaching the weights' host. Tests of the
# downloads (test_weights.py) lift this for a server of their own on 127.0.0.1.
os.environ['INLINE_MM_OFFLINE'] = '1'


def _threads_per_process() -> int:
    """INLINE_MM_TEST_THREADS, else the cores shared out among pytest-xdist's workers (2
    for a plain run on the 2-core CI machine, 1 each for `make test`'s two workers)."""
    if os.environ.get('INLINE_MM_TEST_THREADS'):
        return int(os.environ['INLINE_MM_TEST_THREADS'])
    workers = int(os.environ.get('PYTEST_XDIST_WORKER_COUNT', '1'))
    return max(1, min(2, (os.cpu_count() or 1) // workers))


# Keep the 2-core machine usable by parallel jobs and results repeatable.
torch.set_num_threads(_threads_per_process())
# The suite runs in-process with inline_mm's mmengine behaviours on, as tools/train.py
# and the shipped configs run; what a bare `import inline_mm` does is tested in a
# subprocess (test_package.py).
inline_mm.engine.install()


def _remember_external_bases():
    """mmengine looks each ``mmdet::``/``mmseg::`` base up in all of the package's
    model-zoo yaml files (~400 for mmdet) before falling back to the plain path: 0.5 s per
    base, the same answer every time. Remember the answers for the session (the lookup
    itself is unchanged); collecting the config matrices parses every shipped config."""
    import mmengine.config.utils as cfg_utils
    original = cfg_utils._get_cfg_metainfo
    answers = {}

    def remembered(package_path, cfg_path):
        key = (package_path, cfg_path)
        if key not in answers:
            try:
                answers[key] = original(package_path, cfg_path)
            except ValueError as e:
                answers[key] = e
        if isinstance(answers[key], Exception):
            raise answers[key]
        return answers[key]

    cfg_utils._get_cfg_metainfo = remembered
    # ... and before that asks whether the package is installed, re-importing
    # pkg_resources each time (~20 ms per base).
    import mmengine.config.config as cfg_config
    cfg_config.is_installed = functools.lru_cache(maxsize=None)(cfg_config.is_installed)


_remember_external_bases()

GOLDEN = Path(__file__).parent / 'data' / 'golden'
#: the demo's Mask R-CNN config, parent of the tests' tiny detectors
NANO_DET = (Path(__file__).resolve().parents[1] / 'configs' / 'inline_swin' /
            'mask-rcnn_inline-swin-nano_fpn_1xb4-550it_toy-coco.py')
#: what every shipped config imports: the backbones, and the engine behaviours switched on
CUSTOM_IMPORTS = dict(imports=['inline_mm', 'inline_mm.engine.enable'], allow_failed_imports=False)


def pytest_configure(config):
    config.addinivalue_line('markers', 'performance: timing criteria, run with INLINE_MM_PERF=1')


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / max |b|, the measure of the numerical contract."""
    return ((a.float() - b.float()).abs().max() / b.float().abs().max()).item()


#: the golden cases (tests/data/golden/cases.json): the official architecture, input and
#: weights file of each ``<case>_expected.pth`` (tools/dev/make_goldens.py writes both)
GOLDEN_CASES = json.loads((GOLDEN / 'cases.json').read_text())


def golden_weights(case: str) -> str:
    """The official checkpoint a case runs: its own, or another case's at a new input size."""
    entry = GOLDEN_CASES[case]
    name = entry.get('weights') or entry.get('checkpoint') or f'{case}.pth'
    return str(GOLDEN / name)


def golden_family(case: str):
    """The :class:`~inline_mm.models.Family` of a case (``inline_swin_...`` -> InLineSwin)."""
    by_prefix = {name.lower().replace('inline', 'inline_'): f for name, f in FAMILIES.items()}
    return next(f for prefix, f in by_prefix.items() if case.startswith(prefix + '_'))


def _stage_types(letters: str) -> tuple:
    return tuple({'I': 'inline', 'S': 'softmax'}[c] for c in letters)


#: official architecture (cases.json) -> our backbone's arguments, per family; DeiT taps
#: every block, so every block is an output, and its table is at the 224 training size.
_GOLDEN_ARGS = {
    'InLineSwin': lambda a: dict(embed_dims=a['embed_dim'], depths=tuple(a['depths']),
                                 num_heads=tuple(a['num_heads']),
                                 stage_types=_stage_types(a['attn_type'])),
    'InLinePVT': lambda a: dict(embed_dims=tuple(a['embed_dims']), depths=tuple(a['depths']),
                                num_heads=tuple(a['num_heads'])),
    'InLineCSwin': lambda a: dict(embed_dims=a['embed_dim'], depths=tuple(a['depth']),
                                  num_heads=tuple(a['num_heads'])),
    'InLineDeiT': lambda a: dict(embed_dims=a['embed_dim'], depth=a['depth'],
                                 num_heads=a['num_heads'], pretrain_img_size=224,
                                 out_indices=tuple(range(a['depth']))),
}


def golden_args(case: str) -> dict:
    """Our backbone's arguments for the architecture of a golden case."""
    return _GOLDEN_ARGS[golden_family(case).name](GOLDEN_CASES[case]['architecture'])


def golden_model(case: str, checkpoint=None, **kw):
    """The case's backbone (``kw`` overriding its arguments), loaded from ``checkpoint``
    (default: the case's weights) through ``init_cfg`` as a config loads it, in eval mode."""
    model = golden_family(case).cls(
        **{**golden_args(case), **kw}, drop_path_rate=0.,
        init_cfg=dict(type='Pretrained', checkpoint=str(checkpoint or golden_weights(case))))
    model.init_weights()
    return model.eval()


#: where each family's golden taps are read: (tap name, modules, their output -> tokens)
GOLDEN_TAPS = {
    'InLineSwin': ('stage', lambda m: m.layers, lambda o: o),
    'InLinePVT': ('stage', lambda m: m.stages, lambda o: o[0]),
    'InLineCSwin': ('stage', lambda m: m.stages, lambda o: o[0]),
    'InLineDeiT': ('block', lambda m: m.blocks, lambda o: o),
}


def golden_run(case: str):
    """Run a case: (model, expected dict, {tap name: tokens}, backbone outputs)."""
    expected = torch.load(GOLDEN / f'{case}_expected.pth', weights_only=True)
    model = golden_model(case)
    name, modules, tokens = GOLDEN_TAPS[golden_family(case).name]
    taps = {}
    hooks = [module.register_forward_hook(
        lambda m, i, o, k=k: taps.__setitem__(f'{name}{k}', tokens(o)))
        for k, module in enumerate(modules(model))]
    try:
        with torch.no_grad():
            outs = model(expected['input'])
    finally:
        for h in hooks:
            h.remove()
    return model, expected, taps, outs


@pytest.fixture
def golden():
    """golden(case) -> (checkpoint path, expected dict)."""
    def load(case, weights=None):
        weights = weights or case
        return (str(GOLDEN / f'{weights}.pth'),
                torch.load(GOLDEN / f'{case}_expected.pth', weights_only=True))
    return load


@pytest.fixture
def golden_layouts(tmp_path):
    """golden_layouts(case) -> {layout: path}: the case's official weights as the file
    itself, as a bare state dict, inside an OpenMMLab checkpoint (``backbone.`` prefix, a
    key of another module, under ``state_dict``) and converted to ``.safetensors``: every
    layout a backbone's ``init_cfg`` accepts."""
    from inline_mm.models import convert_official, save_converted

    def save(case):
        official = golden_weights(case)
        state = torch.load(official, weights_only=True)['model']
        paths = {'official': official, 'plain': tmp_path / 'plain.pth',
                 'mm': tmp_path / 'mm.pth', 'converted': tmp_path / 'converted.safetensors'}
        torch.save(state, paths['plain'])
        mm = {f'backbone.{k}': v for k, v in state.items()}
        mm['neck.fpn.weight'] = torch.zeros(3)
        torch.save({'meta': {}, 'state_dict': mm}, paths['mm'])
        save_converted(convert_official(state)[1], str(paths['converted']))
        return paths
    return save


@pytest.fixture
def save_with_yacs_config(monkeypatch):
    """save(path, payload, config): ``torch.save`` of ``payload`` plus ``config`` (nested
    dicts) as the yacs ``CfgNode`` the official training script pickled there, which
    weights-only loading refuses. yacs need not be installed: a stand-in module of that
    name is in ``sys.modules`` only while saving."""
    pkg, mod = types.ModuleType('yacs'), types.ModuleType('yacs.config')

    class CfgNode(dict):
        def __init__(self, init=None):
            super().__init__(init or {})
            self.__dict__['__immutable__'] = False

    CfgNode.__module__, CfgNode.__qualname__ = 'yacs.config', 'CfgNode'
    mod.CfgNode, pkg.config = CfgNode, mod

    def node(d):
        return CfgNode({k: node(v) if isinstance(v, dict) else v for k, v in d.items()})

    def save(path, payload: dict, config: dict):
        with monkeypatch.context() as m:
            m.setitem(sys.modules, 'yacs', pkg)
            m.setitem(sys.modules, 'yacs.config', mod)
            torch.save({**payload, 'config': node(config)}, path)
    return save


@pytest.fixture(scope='session')
def tiny_coco(tmp_path_factory):
    """A toy COCO set of 2 training and 2 validation images, 64 px, 1-2 objects each: the
    data of one-iteration runs of shrunken detectors (support.on_toy_coco)."""
    from inline_mm.datasets.toy.coco import make_coco_toy
    data = tmp_path_factory.mktemp('tiny_coco')
    make_coco_toy(str(data), num_train=2, num_val=2, size=64, max_objects=2, seed=1)
    return data


@pytest.fixture(scope='session')
def tiny_ade(tmp_path_factory):
    """A toy ADE20K set of 2 training and 2 validation images, SEG_SIZE px: the data of
    one-iteration runs of shrunken segmentors (support.on_toy_seg)."""
    from inline_mm.datasets.toy.segmentation import make_ade_toy
    data = tmp_path_factory.mktemp('tiny_ade')
    make_ade_toy(str(data), num_train=2, num_val=2, size=SEG_SIZE)
    return data


@pytest.fixture(autouse=True)
def _seed():
    """Every test starts from the same random state, whatever ran before it on its worker
    (Python's, NumPy's and torch's generators)."""
    import random

    import numpy as np
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)


#: the marks of the tests `make test-fast` leaves out: only these may start a process
SPAWNING_MARKS = ('subprocess', 'slow')


@pytest.fixture(autouse=True)
def _unmarked_tests_start_no_process(request, monkeypatch):
    """`make test-fast` is every test marked neither ``subprocess`` nor ``slow``: in-process
    models and units. Hold every other test to that in every run, so that the fast target
    cannot silently grow a tool run: a test that starts a process (subprocess, os.system)
    without the mark fails, naming the command."""
    if any(request.node.get_closest_marker(m) for m in SPAWNING_MARKS):
        yield
        return
    started = []
    execute_child = subprocess.Popen._execute_child

    def refuse(args):
        started.append(args)
        raise RuntimeError(f'{request.node.nodeid} starts a process ({args!r}) without '
                           '@pytest.mark.subprocess (make test-fast runs it)')

    def execute_unless_a_run(self, args, *a, **kw):
        # mmengine's Runner describes its environment as it starts (`gcc --version`,
        # `git rev-parse HEAD`): queries of a library, not runs, allowed as such.
        words = [str(w) for w in (args.split() if isinstance(args, str) else args)]
        if words[1:] == ['--version'] or words[:2] == ['git', 'rev-parse']:
            return execute_child(self, args, *a, **kw)
        refuse(args)

    monkeypatch.setattr(subprocess.Popen, '_execute_child', execute_unless_a_run)
    monkeypatch.setattr(os, 'system', refuse)
    yield
    if started:     # (also when the code under test swallowed the error)
        pytest.fail(f'started a process without @pytest.mark.subprocess: {started[0]!r}',
                    pytrace=False)


def build_in_each_framework(cfg: dict) -> list:
    """Build ``cfg`` from mmdet's and from mmseg's MODELS, each under its own default
    scope (another test may have left a different scope current)."""
    from mmdet.registry import MODELS as DET
    from mmengine.registry import DefaultScope
    from mmseg.registry import MODELS as SEG
    built = []
    for scope, registry in (('mmdet', DET), ('mmseg', SEG)):
        with DefaultScope.overwrite_default_scope(scope):
            built.append(registry.build(cfg))
    return built
