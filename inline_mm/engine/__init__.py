"""Reliability of training runs with the stock mmengine Runner.

Importing this package (``import inline_mm`` does) only *registers*
:class:`NonFiniteCheckHook` and :class:`DatasetCheckHook` (mmengine ``HOOKS``, so
``custom_hooks`` of mmdet and mmseg configs find them) and the ``CheckSegMapSize``
pipeline steps ``CheckSegMapSize``, ``CheckSegLabels`` and ``CheckImageSize``
(mmseg ``TRANSFORMS``, when mmseg is installed; :mod:`.transforms`); all are off
unless a config asks for them.

:func:`install` (or importing :mod:`inline_mm.engine.enable`) switches on what
replaces mmengine 0.10.7 code, each change only where mmengine fails, so that nothing
changes for runs that work:

- ``Runner.wrap_model`` / the ``pytorch`` launcher: distributed runs on CPU processes
  (gloo) get ``DistributedDataParallel`` without ``device_ids`` and plain BatchNorm
  in place of SyncBN, with one warning (:mod:`.distributed`);
- ``CheckpointHook`` deletes outdated checkpoints only after the new one is written,
  and ``--resume`` skips a missing or incomplete latest checkpoint
  (:mod:`.checkpointing`);
- a file given as ``load_from``, ``--resume PATH`` or the checkpoint of ``test.py`` that
  is no checkpoint is named for what it is (an HTML page, an image, a file cut short),
  not met with torch's advice to load it with ``weights_only=False`` (:mod:`.loading`);
- ``Runner.build_dataloader`` says why a dataset came out empty and refuses COCO classes
  that name no category of the training file (:mod:`.data_checks`);
- ``compile=True``: the optimiser's parameter groups are plain dicts when the Runner
  compiles ``train_step``, as Dynamo needs them to trace the optimiser step
  (:mod:`.compiling`);
- where mmengine retries a checkpoint that torch refuses with ``weights_only=False``
  (onedl-mmengine 0.10.8+), the retry is dropped: torch's refusal stands
  (:func:`.loading.install_strict`).

Each behaviour has a feature check (``needed()`` of its module, :func:`needed`) that reads the
installed mmengine; :func:`install` switches on only those it needs (``python -m
inline_mm.env`` lists them).

Who switches them on: ``tools/train.py`` and ``tools/test.py`` call :func:`install`;
the shipped configs list ``'inline_mm.engine.enable'`` in ``custom_imports``, so
``mim train`` and the stock mmdet/mmseg tools get them too. A config that imports
only ``inline_mm`` (the template before this change) still trains; run by a stock
tool it warns once, naming the line to add (:func:`warn_if_config_lacks_enable`).

Nothing here imports mmdet/mmseg models or mmcv's compiled ops.
"""
import os
import sys
import warnings

from . import checkpointing, compiling, data_checks, distributed, loading
from .data_checks import DatasetCheckHook, check_coco
from .nonfinite import NonFiniteCheckHook, NonFiniteLossError
from .transforms import CheckImageSize, CheckSegLabels, CheckSegMapSize

__all__ = ['NonFiniteCheckHook', 'NonFiniteLossError', 'DatasetCheckHook', 'CheckSegMapSize',
           'CheckSegLabels', 'CheckImageSize',
           'check_coco', 'install', 'installed', 'ENABLE_MODULE', 'CUSTOM_IMPORTS_LINE']

#: what a config lists in ``custom_imports`` to switch the behaviours on
ENABLE_MODULE = 'inline_mm.engine.enable'
CUSTOM_IMPORTS_LINE = (f"custom_imports = dict(imports=['inline_mm', '{ENABLE_MODULE}'], "
                       'allow_failed_imports=False)')

#: name -> (install, is installed, needed); each install is idempotent, and each ``needed()``
#: is a feature check of the installed mmengine returning ``(bool, why)``
BEHAVIOURS = {
    'cpu_distributed': (distributed.install, distributed.installed, distributed.needed),
    'safe_checkpoints': (checkpointing.install, checkpointing.installed, checkpointing.needed),
    'checkpoint_file_messages': (loading.install, loading.installed, loading.needed),
    'strict_checkpoint_loading': (loading.install_strict, loading.installed_strict,
                                  loading.needed_strict),
    'empty_dataset_messages': (data_checks.install, data_checks.installed, data_checks.needed),
    'compile_param_groups': (compiling.install, compiling.installed, compiling.needed),
}


def needed(name: str):
    """``(needed, why)`` for one behaviour of :data:`BEHAVIOURS`, by its feature check."""
    return BEHAVIOURS[name][2]()


def install():
    """Switch on every behaviour of :data:`BEHAVIOURS` that the installed mmengine needs
    (idempotent); the others leave mmengine's code as it is."""
    for name, (do, _, _) in BEHAVIOURS.items():
        if needed(name)[0]:
            do()


def installed() -> bool:
    """Whether every behaviour this mmengine needs is switched on in this process."""
    return all(done() for name, (_, done, _) in BEHAVIOURS.items() if needed(name)[0])


_warned = False


def _config_imports():
    """The ``custom_imports`` list of the config being read, when this import comes from
    mmengine's ``Config.fromfile`` (``import_modules_from_strings(imports)``); else None."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == 'import_modules_from_strings' and \
                frame.f_globals.get('__name__') == 'mmengine.utils.misc':
            imports = frame.f_locals.get('imports')
            return [imports] if isinstance(imports, str) else list(imports or [])
        frame = frame.f_back
    return None


def warn_if_config_lacks_enable():
    """Warn once when a config's ``custom_imports`` brings in ``inline_mm`` without
    :data:`ENABLE_MODULE` and nothing has switched the behaviours on (a stock tool
    or ``mim`` reading a config written before they became opt-in)."""
    global _warned
    if _warned or installed():
        return
    imports = _config_imports()
    if imports is None or ENABLE_MODULE in imports:
        return
    _warned = True
    if os.environ.get('RANK', '0') != '0':
        return
    warnings.warn(
        "inline_mm: this config's custom_imports lists 'inline_mm' but not "
        f"'{ENABLE_MODULE}', so this run goes without inline_mm's training fixes "
        '(distributed training on CPU processes, old checkpoints deleted only after the new '
        'one is saved, --resume past an incomplete checkpoint, reasons for empty datasets). '
        f'tools/train.py and tools/test.py switch them on; for mim and the stock tools put '
        f'this line in the config:\n    {CUSTOM_IMPORTS_LINE}', UserWarning, stacklevel=2)
