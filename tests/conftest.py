import os
from pathlib import Path

import pytest
import torch

# Keep the 2-core machine usable by parallel jobs and results repeatable.
torch.set_num_threads(int(os.environ.get('INLINE_MM_TEST_THREADS', '2')))

GOLDEN = Path(__file__).parent / 'data' / 'golden'


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
