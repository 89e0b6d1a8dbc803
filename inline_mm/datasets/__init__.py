"""Your own segmentation data: ``SegFolderDataset`` and ``PaletteIoUMetric``.

``import inline_mm`` registers both names in mmseg's ``DATASETS`` / ``METRICS``, so
configs can say ``type='SegFolderDataset'`` and ``type='PaletteIoUMetric'``.

The registry entries are small builders that import the real classes on first use:
the classes subclass mmseg's dataset and metric bases, and importing those pulls in
mmseg's whole data-transform stack, which ``import inline_mm`` should not pay for
(building a dataset from a config imports it anyway). The classes themselves are
importable as ``from inline_mm.datasets import SegFolderDataset, PaletteIoUMetric``.
"""
import importlib

from mmseg.registry import DATASETS, METRICS

__all__ = ['SegFolderDataset', 'PaletteIoUMetric', 'load_meta']

_LAZY = {'SegFolderDataset': '.folder', 'load_meta': '.folder',
         'IMAGE_SUFFIXES': '.folder', 'PaletteIoUMetric': '.metrics'}


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


def _builder(name: str):
    def build(**kwargs):
        return __getattr__(name)(**kwargs)
    build.__name__ = build.__qualname__ = name
    build.__doc__ = f'Build ``inline_mm.datasets.{name}`` (imported on first use).'
    return build


DATASETS.register_module(name='SegFolderDataset', module=_builder('SegFolderDataset'))
METRICS.register_module(name='PaletteIoUMetric', module=_builder('PaletteIoUMetric'))
