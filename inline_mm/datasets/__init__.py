"""Your own segmentation data: ``SegFolderDataset``, ``PaletteIoUMetric`` and the data
checks that ``tools/misc/check_dataset.py`` and the training hooks share, each finding a
:class:`~.problems.Problem`: of segmentation folders (:mod:`.folder_checks`), of one file
decoded as training will (:mod:`.image_reading`), of the files of built datasets
(:mod:`.dataset_files`); the checks of COCO instance files and the class names the
own-instance templates read from them (:mod:`.coco_checks`).

``import inline_mm`` registers ``SegFolderDataset`` and ``PaletteIoUMetric`` in mmseg's
``DATASETS`` / ``METRICS`` when mmseg is installed, so configs can say
``type='SegFolderDataset'`` and ``type='PaletteIoUMetric'``.

The registry entries are small builders that import the real classes on first use:
the classes subclass mmseg's dataset and metric bases, and importing those pulls in
mmseg's whole data-transform stack, which ``import inline_mm`` should not pay for
(building a dataset from a config imports it anyway). The classes themselves are
importable as ``from inline_mm.datasets import SegFolderDataset, PaletteIoUMetric``.
"""
import importlib

from ..models.registry import framework_registry

__all__ = ['SegFolderDataset', 'PaletteIoUMetric', 'load_meta', 'IMAGE_SUFFIXES']

_LAZY = {'SegFolderDataset': '.folder', 'load_meta': '.folder',
         'IMAGE_SUFFIXES': '.folder_checks', 'PaletteIoUMetric': '.metrics'}


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


_DATASETS = framework_registry('mmseg', 'DATASETS')
if _DATASETS is not None:       # segmentation only: nothing to register without mmseg
    _DATASETS.register_module(name='SegFolderDataset', module=_builder('SegFolderDataset'))
    framework_registry('mmseg', 'METRICS').register_module(
        name='PaletteIoUMetric', module=_builder('PaletteIoUMetric'))
