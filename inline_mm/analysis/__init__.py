"""Measuring a model without training it: its parameters and multiply-accumulates
(:mod:`.complexity`, ``tools/analysis_tools/get_flops.py``), the GPU memory a config needs,
counted on fake tensors (:mod:`.memory`, ``tools/analysis_tools/estimate_memory.py``), and one
detector's outputs compared across two runs (:mod:`.consistency`,
``tools/analysis_tools/padding_consistency.py``).

Importing this package imports nothing: import the module you need. (Its names of 0.1.x,
``count_macs``, ``measure``, ..., still import from here, with a warning, until 0.3.0.)
"""
from ..version import moved_attribute


def __getattr__(name: str):
    # 0.1.x's `from inline_mm.analysis import count_macs, measure` (inline_mm.version.MOVED_NAMES)
    return moved_attribute(__name__, name)
