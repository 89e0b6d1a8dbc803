"""Let mmengine 0.10.7 read its own checkpoints on torch >= 2.6, safely.

torch >= 2.6 defaults ``torch.load`` to ``weights_only=True``; mmengine 0.10.7 (its
last release) calls ``torch.load`` without the argument, so ``--resume`` and
``load_from`` fail on the non-tensor objects mmengine itself writes (the message
hub's ``HistoryBuffer`` of numpy arrays, numpy scalars in the runtime info).

We do *not* switch safe loading off (``weights_only=False`` everywhere, or
``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD``): that would let any checkpoint run code.
Instead the few types that mmengine's checkpoints are made of are added to
torch's allowlist.  Each is plain data with no side effects on load; the one
function among them, ``getattr``, is replaced by a version that only returns
``HistoryBuffer``'s statistics methods.  Any other
object in a checkpoint is still refused by torch with its usual message.
"""
import pickle

import numpy as np
import torch

__all__ = ['MMENGINE_CHECKPOINT_GLOBALS', 'allow_mmengine_checkpoints']


def _numpy_globals():
    core = getattr(np, '_core', None) or np.core
    out = [np.ndarray, np.dtype,
           (core.multiarray._reconstruct, 'numpy.core.multiarray._reconstruct'),
           (core.multiarray._reconstruct, 'numpy._core.multiarray._reconstruct'),
           (core.multiarray.scalar, 'numpy.core.multiarray.scalar'),
           (core.multiarray.scalar, 'numpy._core.multiarray.scalar')]
    # numpy >= 1.25 pickles dtypes through their classes in numpy.dtypes.
    dtypes = getattr(np, 'dtypes', None)
    if dtypes is not None:
        out += [getattr(dtypes, n) for n in dir(dtypes) if n.endswith('DType')]
    return out


def _history_buffer_getattr(obj, name):
    """``getattr`` limited to what mmengine's ``HistoryBuffer`` pickles.

    ``HistoryBuffer.__getstate__`` stores its statistics methods, which pickle as
    ``getattr(HistoryBuffer, 'mean')``.  A general ``getattr`` in the allowlist would
    let a crafted file walk from any allowed object to ``os.system``; this one only
    returns HistoryBuffer's registered statistics methods.
    """
    from mmengine.logging.history_buffer import HistoryBuffer
    if obj is HistoryBuffer and name in HistoryBuffer._statistics_methods | {
            'min': 0, 'max': 0, 'current': 0, 'mean': 0}:
        return getattr(obj, name)
    raise pickle.UnpicklingError(
        f'refusing getattr({obj!r}, {name!r}) while loading a checkpoint: only '
        'HistoryBuffer statistics methods are allowed')


def _mmengine_globals():
    from mmengine.logging.history_buffer import HistoryBuffer
    return [HistoryBuffer, (_history_buffer_getattr, 'builtins.getattr')]


MMENGINE_CHECKPOINT_GLOBALS = None


def allow_mmengine_checkpoints():
    """Add mmengine's checkpoint types to torch's ``weights_only`` allowlist (idempotent).

    Needed wherever torch has the allowlist (torch >= 2.4; it refuses by default from 2.6) and
    mmengine's loader calls ``torch.load`` without naming these types: upstream mmengine 0.10.7
    names none; onedl-mmengine 0.10.12 names its own inside a ``safe_globals`` context, whose
    exit *removes* those types from torch's global allowlist again (ours included), and
    which allows a general ``getattr``.  Each call therefore adds the types again (a set
    insertion); :func:`inline_mm.patches.loading.install_strict` calls it before every load.
    """
    global MMENGINE_CHECKPOINT_GLOBALS
    if MMENGINE_CHECKPOINT_GLOBALS is None:
        MMENGINE_CHECKPOINT_GLOBALS = _numpy_globals() + _mmengine_globals()
    if hasattr(torch.serialization, 'add_safe_globals'):
        torch.serialization.add_safe_globals(MMENGINE_CHECKPOINT_GLOBALS)
    return MMENGINE_CHECKPOINT_GLOBALS
