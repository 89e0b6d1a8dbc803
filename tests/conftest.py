import os
from pathlib import Path

import pytest
import torch

import inline_mm.engine
from inline_mm.models import FAMILIES

# No test downloads: a shipped config's 'inline://...' checkpoint that a test forgets to
# replace fails (naming the file) instead of reaching the weights' host. Tests of the
# downloads (test_weights.py) lift this for a server of their own on 127.0.0.1.
os.environ['INLINE_MM_OFFLINE'] = '1'
# Keep the 2-core machine usable by parallel jobs and results repeatable.
torch.set_num_threads(int(os.environ.get('INLINE_MM_TEST_THREADS', '2')))
# The suite runs in-process with inline_mm's mmengine behaviours on, as tools/train.py
# and the shipped configs run; what a bare `import inline_mm` does is tested in a
# subprocess (test_package.py).
inline_mm.engine.install()

GOLDEN = Path(__file__).parent / 'data' / 'golden'
#: the demo's Mask R-CNN config, parent of the tests' tiny detectors
NANO_DET = (Path(__file__).resolve().parents[1] / 'configs' / 'inline_swin' /
            'mask-rcnn_inline-swin-nano_fpn_1xb4-600it_toy-coco.py')
#: config lines shrinking NANO_DET's model to a 16-wide InLine-Swin Mask R-CNN (seconds on CPU)
TINY_DET_MODEL = f"""
_base_ = {str(NANO_DET)!r}
model = dict(backbone=dict(embed_dims=16, num_heads=(1, 2, 4, 8), depths=(1, 1, 1, 1)),
             neck=dict(in_channels=[16, 32, 64, 128], out_channels=16),
             rpn_head=dict(in_channels=16, feat_channels=16),
             roi_head=dict(bbox_roi_extractor=dict(out_channels=16),
                           bbox_head=dict(in_channels=16, fc_out_channels=32),
                           mask_roi_extractor=dict(out_channels=16),
                           mask_head=dict(in_channels=16, conv_out_channels=16, num_convs=1)))
"""
#: what every shipped config imports: the backbones, and the engine behaviours switched on
CUSTOM_IMPORTS = dict(imports=['inline_mm', 'inline_mm.engine.enable'], allow_failed_imports=False)


def pytest_configure(config):
    config.addinivalue_line('markers', 'performance: timing criteria, run with INLINE_MM_PERF=1')


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / max |b|, the measure of the numerical contract."""
    return ((a.float() - b.float()).abs().max() / b.float().abs().max()).item()


@pytest.fixture
def golden():
    """golden(case) -> (checkpoint path, expected dict)."""
    def load(case, weights=None):
        weights = weights or case
        return (str(GOLDEN / f'{weights}.pth'),
                torch.load(GOLDEN / f'{case}_expected.pth', weights_only=True))
    return load


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


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


def shrink_backbone(backbone: dict) -> dict:
    """A config's backbone made CPU-test sized, in place: the widths of its family's
    ``smoke`` configuration; a pyramid keeps its stage types (the preset's or the
    config's) with one block per stage, two (first and last type) in a mixed stage."""
    family = FAMILIES[backbone['type']]
    preset = family.presets[backbone.get('arch', 'tiny')]
    backbone.update({k: v for k, v in family.smoke.items()
                     if k not in ('depths', 'stage_types', 'drop_path_rate')}, init_cfg=None)
    types = backbone.get('stage_types') or preset.get('stage_types')
    if types is not None:
        backbone['stage_types'] = [t if isinstance(t, str) else (t[0], t[-1]) for t in types]
        backbone['depths'] = [1 if isinstance(t, str) else 2 for t in backbone['stage_types']]
    return backbone


def out_channels(backbone: dict) -> list:
    """Output channels of a config's backbone (built on the meta device)."""
    args = {k: v for k, v in backbone.items() if k not in ('type', 'init_cfg')}
    with torch.device('meta'):
        return list(FAMILIES[backbone['type']].cls(**args).out_channels)
