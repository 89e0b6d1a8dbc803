"""Reliability of training runs with the stock mmengine Runner.

Importing this package (``import inline_mm`` does) only *registers*
:class:`NonFiniteCheckHook`, :class:`DatasetCheckHook` and :class:`PredictionOverlayHook`
(mmengine ``HOOKS``, so
``custom_hooks`` of mmdet and mmseg configs find them), the FSDP auto-wrap policy
``inline_auto_wrap_policy`` (mmengine ``FUNCTIONS``; :mod:`.fsdp`) and the ``CheckSegMapSize``
pipeline steps ``CheckSegMapSize``, ``CheckSegLabels`` and ``CheckImageSize``
(mmseg ``TRANSFORMS``, when mmseg is installed; :mod:`.transforms`); all are off
unless a config asks for them.

:func:`install` (or importing :mod:`inline_mm.engine.enable`) switches on the rows of
:data:`PATCHES` (each in its module of :mod:`inline_mm.patches`) that replace mmengine code, each
only where its feature check says the installed mmengine needs it and each acting only where
mmengine fails, so that nothing changes for runs that work: CPU DDP
(:mod:`inline_mm.patches.distributed`), checkpoint pruning after the save and the ``--resume``
fallback (:mod:`inline_mm.patches.checkpointing`), the random state in checkpoints, restored at
``--resume``, and validation on a copy of it (:mod:`inline_mm.patches.random_state`; this one
changes the numbers a run draws after each validation), data workers that end with their parent
(:mod:`inline_mm.patches.workers`), files that are no checkpoint named for what they are and
onedl-mmengine's ``weights_only=False`` retry removed (:mod:`inline_mm.patches.loading`), reasons
for empty datasets (:mod:`inline_mm.patches.empty_datasets`), plain parameter groups for
``compile=True`` (:mod:`inline_mm.patches.compiling`), predictions made under autocast handed on in
fp32 (:mod:`inline_mm.patches.predictions`), compiled mmcv's ops run bf16 in fp32
(:mod:`inline_mm.patches.mmcv_bf16`). ``python -m inline_mm.env`` lists them, on or off.

Who switches them on: ``tools/train.py`` and ``tools/test.py`` call :func:`install`; the
shipped configs list ``'inline_mm.engine.enable'`` in ``custom_imports``, so ``mim train``
and the stock mmdet/mmseg tools get them too::

    custom_imports = dict(imports=['inline_mm', 'inline_mm.engine.enable'],
                          allow_failed_imports=False)

Nothing here imports mmdet/mmseg models or mmcv's compiled ops (the ``mmcv_bf16`` row, on only
with compiled mmcv, imports mmcv's op modules when :func:`install` switches it on).
"""
from . import fsdp  # noqa: F401  (registers inline_auto_wrap_policy)
from ..patches import engine_rows
from .overlays import PredictionOverlayHook
from .data_checks import DatasetCheckHook, check_coco
from .nonfinite import NonFiniteCheckHook, NonFiniteLossError
from .transforms import CheckImageSize, CheckSegLabels, CheckSegMapSize

__all__ = ['NonFiniteCheckHook', 'NonFiniteLossError', 'DatasetCheckHook', 'PredictionOverlayHook',
           'CheckSegMapSize', 'CheckSegLabels', 'CheckImageSize', 'check_coco', 'install',
           'installed', 'PATCHES']

#: the rows of the patch table the engine switches on (:mod:`inline_mm.patches`, each module
#: beside its row; ``python -m inline_mm.env`` lists them with the others)
PATCHES = engine_rows()


def install():
    """Switch on every row of :data:`PATCHES` that the installed mmengine needs
    (idempotent); the others leave mmengine's code as it is."""
    for patch in PATCHES:
        if patch.needed()[0]:
            patch.install()


def installed() -> bool:
    """Whether every engine behaviour this mmengine needs is switched on in this process."""
    return all(patch.active() for patch in PATCHES if patch.needed()[0])
