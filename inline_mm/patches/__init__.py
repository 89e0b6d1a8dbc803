"""Every change inline_mm makes to code of another package, and the table of them.

The :class:`Patch` record each change is (:mod:`.patch`), and one module per change (or per patched
function), beside its row:

======================================  ==================================================
module                                  changes
======================================  ==================================================
``_inline_mm_mmcv_hook`` (interpreter   ``import mmcv._ext`` (answered by :mod:`.mmcv_ext`),
start, outside the package)             mmcv.ops' unserved ops, mmengine's base table
:mod:`.mmcv_ext`                        the stand-in for mmcv's compiled extension
:mod:`.mmengine_checkpoints`            torch's ``weights_only`` allowlist (``import inline_mm``)
:mod:`.distributed`                     mmengine's launcher and DDP wrapping on CPU
:mod:`.checkpointing`                   checkpoint pruning order, resume fallback
:mod:`.random_state`                    generator states saved and restored on resume
:mod:`.loading`                         checkpoint file messages, strict safe loading
:mod:`.empty_datasets`                  why a dataset is empty
:mod:`.workers`                         data workers die with their parent
:mod:`.compiling`                       plain parameter groups for ``compile=True``
:mod:`.predictions`                     fp32 predictions from low-precision evaluation
:mod:`.mmcv_bf16`                       bf16 through compiled mmcv's RoIAlign and others
:mod:`.nms_scores`                      mmcv's nms: kept scores in the scores' own dtype
======================================  ==================================================

:data:`PATCHES` holds the rows switched on at interpreter start and at ``import inline_mm``;
:func:`engine_rows` those ``inline_mm.engine.install()`` switches on (their modules import
mmengine); :func:`table` all of them, as ``python -m inline_mm.env`` prints them.

Each row says what it replaces, why, the versions it applies to, when it is switched on, and
how the running process decides whether it is needed. The feature checks run nothing and read
no source text: they compare installed versions or look an attribute up, so they are cheap,
free of side effects and safe at import.

When each row is switched on:

- ``interpreter start``: the one-line ``inline_mm_mmcv_ext.pth`` that the wheel (or
  ``make setup``) puts in site-packages runs ``_inline_mm_mmcv_hook`` before any code, because
  mmdet and mmseg import ``mmcv.ops`` and mmengine reads config bases before a config could
  import inline_mm; each of its rows has an environment variable that switches it off;
- ``import inline_mm``: only the checkpoint allowlist (the README names it);
- ``inline_mm.engine.install()``: the tools call it, and configs list
  ``'inline_mm.engine.enable'`` in ``custom_imports`` (which calls it).
"""
import importlib.util

from .patch import (AT_IMPORT, AT_START, BY_ENGINE, Patch, always, before_fixed_mmengine,
                    mmengine_version, start_hook, wrap_once, wrapped)

__all__ = ['Patch', 'PATCHES', 'AT_START', 'AT_IMPORT', 'BY_ENGINE', 'switched_off',
           'before_fixed_mmengine', 'always', 'mmengine_version', 'engine_rows', 'table', 'find',
           'wrap_once', 'wrapped']


# ------------------------------------------------------------ interpreter start
def _mmcv_ext_needed():
    hook = start_hook()
    if importlib.util.find_spec('mmcv') is None:
        return False, 'mmcv is not installed'
    if hook is not None and hook.compiled_ext_present():
        return False, 'mmcv has its compiled mmcv._ext'
    return True, 'mmcv has no compiled ops (mmcv-lite, or onedl-mmcv built with MMCV_WITH_OPS=0)'


def _mmcv_ext_active():
    hook = start_hook()
    return hook is not None and hook.fallback_active()


def _ops_guard_active():
    hook = start_hook()
    return hook is not None and hook.ops_guard_active()


def _bases_active():
    hook = start_hook()
    return hook is not None and hook.config_bases_active()


def _scope_needed():
    hook = start_hook()
    if hook is None:
        return False, 'the interpreter-start hook is not importable'
    if importlib.util.find_spec('mmengine') is None:
        return False, 'mmengine is not installed'
    importlib.import_module(hook.CONFIG_UTILS)      # the table, as mmengine holds it
    unresolved = hook.unresolved_scopes()
    if unresolved:
        return True, ', '.join(f'{scope}:: names the distribution {package!r}, which is not '
                               'installed' for scope, package in unresolved.items())
    return False, "mmengine's own look-up finds every installed scope"


def _scope_active():
    hook = start_hook()
    return bool(hook is not None and hook.REPOINTED_SCOPES)


# ------------------------------------------------------------ import inline_mm
def _allowlist_needed():
    import torch
    if not hasattr(torch.serialization, 'add_safe_globals'):
        return False, f'torch {torch.__version__} has no weights_only allowlist'
    return True, (f'torch {torch.__version__} refuses types off its allowlist under '
                  'weights_only=True (the default from 2.6)')


def _allowlist_active():
    import torch
    get = getattr(torch.serialization, 'get_safe_globals', None)
    if get is None:
        return False
    from .mmengine_checkpoints import MMENGINE_CHECKPOINT_GLOBALS
    allowed = {id(g[0] if isinstance(g, tuple) else g) for g in get()}
    ours = MMENGINE_CHECKPOINT_GLOBALS or []
    return bool(ours) and all(id(g[0] if isinstance(g, tuple) else g) in allowed for g in ours)


def _allowlist_install():
    from .mmengine_checkpoints import allow_mmengine_checkpoints
    allow_mmengine_checkpoints()


PATCHES = (
    Patch('mmcv_ext_fallback', '`import mmcv._ext` (mmcv): answered by '
          'inline_mm/patches/mmcv_ext.py, '
          'nms and RoIAlign on torchvision.ops, the sigmoid focal loss and multi-scale '
          'deformable attention in PyTorch',
          'mmcv without compiled ops cannot run Mask R-CNN (its NMS and RoIAlign are C++), nor '
          'RetinaNet, FCOS, DINO or Mask2Former on a GPU (their CUDA branches call C++)',
          'mmcv without compiled ops', AT_START, _mmcv_ext_needed, _mmcv_ext_active,
          switch_off='INLINE_MM_MMCV_FALLBACK=0'),
    Patch('mmcv_unserved_ops_refused', "mmcv.ops' DeformConv2d, ModulatedDeformConv2d, "
          'CARAFENaive, CARAFE, CARAFEPack, PSAMask, DeformRoIPool, RoIPool (and their '
          'subclasses DCN, DCNv2 ...): __init__ raises, naming the compiled mmcv they need',
          'with the stand-in a model with them builds, then stops at its first iteration',
          'mmcv without compiled ops', AT_START, _mmcv_ext_needed, _ops_guard_active,
          switch_off='INLINE_MM_MMCV_FALLBACK=0'),
    Patch('inline_mm_bases', "mmengine's MODULE2PACKAGE table gains 'inline_mm'",
          "mmengine resolves `pkg::` config bases only for the OpenMMLab packages it lists",
          'every mmengine', AT_START,
          always("mmengine's table lists OpenMMLab projects only"), _bases_active,
          switch_off='INLINE_MM_CONFIG_BASES=0'),
    Patch('mmseg_scope', "MODULE2PACKAGE['mmseg'] re-pointed at the import name",
          "no `mmseg::` base resolves where mmseg's distribution is not 'mmsegmentation'",
          'onedl-mmsegmentation', AT_START, _scope_needed, _scope_active,
          switch_off='INLINE_MM_SCOPE_FIX=0'),
    Patch('checkpoint_allowlist', "torch's weights_only allowlist gains mmengine's checkpoint "
          'types (numpy arrays and scalars, HistoryBuffer, a getattr limited to it)',
          "resume, load_from and the inferencers refuse mmengine's own checkpoints",
          'torch >= 2.4', AT_IMPORT, _allowlist_needed,
          _allowlist_active, _allowlist_install),
)


def switched_off(patch: Patch) -> bool:
    """Whether the environment switches ``patch`` off (its ``switch_off`` setting is set)."""
    if not patch.switch_off:
        return False
    import os
    var, value = patch.switch_off.split('=')
    return os.environ.get(var) == value


def engine_rows() -> tuple:
    """The rows ``inline_mm.engine.install()`` switches on, in the order it does. Their modules
    import mmengine, so they are imported here, when asked, not with this package."""
    from . import (checkpointing, compiling, distributed, empty_datasets, loading, mmcv_bf16,
                   nms_scores, predictions, random_state, workers)
    modules = (distributed, checkpointing, random_state, loading, empty_datasets, workers,
               compiling, predictions, mmcv_bf16, nms_scores)
    return sum((m.PATCHES for m in modules), ())


def table() -> tuple:
    """The whole table: :data:`PATCHES` and, where mmengine imports, :func:`engine_rows`."""
    try:
        engine = engine_rows()
    except ImportError:  # no mmengine: its rows do not apply
        engine = ()
    return PATCHES + engine


def find(name: str) -> Patch:
    """The row of :func:`table` called ``name``."""
    rows = table()
    for patch in rows:
        if patch.name == name:
            return patch
    raise KeyError(f'no patch {name!r}; the table has {[p.name for p in rows]}')
