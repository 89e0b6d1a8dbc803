"""Random state in every checkpoint: a killed and resumed run draws the numbers the
uninterrupted run drew, and ends with its weights.

mmengine (0.10.7, onedl-mmengine 0.10.12) seeds the generators in ``Runner.__init__`` and
saves no generator state, so after ``--resume`` drop-path, dropout, the RPN and RoI
samplers (``torch.randperm``) and main-process augmentations draw what they drew at the
start of the run.  The row ``resume_random_state`` of :data:`PATCHES` below changes four
methods of ``Runner``:

* ``save_checkpoint``: every rank's state (torch's CPU generator, the current CUDA device's,
  numpy's and Python's) is gathered before the save, which mmengine runs on rank 0 only
  (the gather is the one collective, outside the save, on every rank as ``CheckpointHook``
  calls it), and stored as ``checkpoint['meta']['rng_state']``: one entry per rank, tensors
  and numbers only, so the checkpoint loads under ``weights_only``;
* ``load_checkpoint`` keeps what it found for ``resume``, which arms the restore: each rank
  gets its own state back at the first resumed training iteration, once mmengine has
  built its iterators and skipped the trained batches (``IterBasedTrainLoop``: before the
  first batch after the skipped ones is fetched; ``EpochBasedTrainLoop``: before the first
  resumed epoch, whose iterator the uninterrupted run also built after its save);
* ``build_val_loop``: validation runs on a copy of the generators (the shipped recipes
  validate at every checkpoint: the iterator of the validation loader alone draws from
  torch's generator), and a checkpoint saved during validation (``save_best``) holds the
  training state.

A checkpoint without the state (an older file, another tool's), one saved by another number
of processes, an epoch-based run resumed from the middle of an epoch (mmengine restarts the
epoch) or with persistent data workers (their streams restart) resume as before, with one
line saying that the run is not resumed exactly.  What is not covered: generators other
than the global ones (a ``torch.Generator`` a user's module owns), data workers' own state
outside the cases above, ``FlexibleRunner``.
"""
import functools
import inspect
import logging
import random
from typing import List

import numpy as np
import torch

from .patch import BY_ENGINE, Patch, always

__all__ = ['PATCHES', 'KEY', 'capture', 'restore', 'gather', 'install', 'installed']

#: where the states are, in ``checkpoint['meta']``
KEY = 'rng_state'
_MISSING = object()
#: the runner attribute holding the training state while validation runs on a copy
_TRAINING = '_inline_mm_training_rng'
#: the runner attribute holding what the last ``load_checkpoint`` found
_LOADED = '_inline_mm_loaded_rng'


def _cuda_in_use() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_initialized()


def capture() -> dict:
    """This process's random state: torch's CPU generator, the current CUDA device's (None
    where CUDA is not in use), numpy's and Python's, as tensors and numbers."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    version, internal, py_gauss = random.getstate()
    return dict(
        torch=torch.get_rng_state(),
        cuda=torch.cuda.get_rng_state(torch.cuda.current_device()) if _cuda_in_use() else None,
        numpy=dict(kind=kind, keys=torch.from_numpy(keys.astype(np.int64)), pos=int(pos),
                   has_gauss=int(has_gauss), gauss=float(gauss)),
        python=dict(version=version, internal=torch.tensor(internal, dtype=torch.int64),
                    gauss=py_gauss))


def restore(state: dict) -> None:
    """Set this process's generators to ``state`` (from :func:`capture`)."""
    torch.set_rng_state(state['torch'])
    if state['cuda'] is not None:
        torch.cuda.set_rng_state(state['cuda'], torch.cuda.current_device())
    n = state['numpy']
    np.random.set_state((n['kind'], n['keys'].numpy().astype(np.uint32), n['pos'],
                         n['has_gauss'], n['gauss']))
    p = state['python']
    random.setstate((p['version'], tuple(p['internal'].tolist()), p['gauss']))


def _training_state(runner) -> dict:
    """The state training goes on from: during validation, the one validation started from."""
    held = getattr(runner, _TRAINING, None)
    return held if held is not None else capture()


def gather(runner) -> List[dict]:
    """Every rank's training state, rank by rank (a collective when there are several)."""
    from mmengine.dist import all_gather_object, get_world_size
    local = _training_state(runner)
    return [local] if get_world_size() == 1 else all_gather_object(local)


def _not_exact(runner, source, why: str) -> None:
    from mmengine.logging import print_log
    print_log(f'Resuming from {source} not exactly: {why}; the random numbers drawn from now '
              'on (drop-path, dropout, samplers, augmentations) differ from those of the '
              'interrupted run.', logger='current', level=logging.WARNING)


class _RestoreAfterSkip:
    """Stands in for ``IterBasedTrainLoop.dataloader_iterator``: once the ``skip`` batches
    mmengine advances past are taken (``next`` upstream, ``skip_iter`` on onedl-mmengine),
    restores ``state`` before the next batch is fetched, after the iterator that fetches it
    exists (onedl-mmengine builds it then, drawing its seed as the uninterrupted run did
    before its first batch)."""

    def __init__(self, iterator, skip: int, state: dict, on_fresh_workers):
        self._iterator, self._left, self._state = iterator, skip, state
        self._on_fresh_workers = on_fresh_workers

    def __iter__(self):
        return self

    def skip_iter(self, num_iters: int):
        self._iterator.skip_iter(num_iters)
        self._left -= num_iters
        # onedl-mmengine's sampler-level skip loads nothing: workers start at the resumed
        # position with the random streams of the run's start.
        if getattr(self._iterator, '_iterator', True) is None and \
                getattr(self._iterator._dataloader, 'num_workers', 0) > 0:
            self._on_fresh_workers()

    def __next__(self):
        if self._left == 0:
            ensure = getattr(self._iterator, '_ensure_iterator', None)
            if ensure is not None:
                ensure()
            restore(self._state)
            self._state = None
        if self._left >= 0:
            self._left -= 1
        return next(self._iterator)

    def __getattr__(self, name):
        return getattr(self._iterator, name)


def _restore_before_first_epoch(loop, state: dict) -> None:
    run_epoch = loop.run_epoch

    def first_epoch(*args, **kwargs):
        del loop.run_epoch          # the class's method from now on
        restore(state)
        return run_epoch(*args, **kwargs)
    loop.run_epoch = first_epoch


def _arm(runner, source, states) -> None:
    """Restore this rank's entry of ``states`` at the first resumed training iteration."""
    from mmengine.dist import get_rank, get_world_size
    from mmengine.runner import EpochBasedTrainLoop, IterBasedTrainLoop
    loop, world = runner.train_loop, get_world_size()
    if states is _MISSING or states is None:
        return _not_exact(runner, source, 'it holds no random state (saved by another tool, '
                          'or without inline_mm.engine.install())')
    if len(states) != world:
        return _not_exact(runner, source, f'it holds the random state of {len(states)} '
                          f'process(es) and this run has {world}')
    state = states[get_rank()]
    if (state['cuda'] is not None) != _cuda_in_use():
        return _not_exact(runner, source, 'it was saved with' + ('' if state['cuda'] is not None
                          else 'out') + ' CUDA and this run is not')
    if isinstance(loop, IterBasedTrainLoop):
        loop.dataloader_iterator = _RestoreAfterSkip(
            loop.dataloader_iterator, loop.iter, state, lambda: _not_exact(
                runner, source, 'the trained batches were skipped without loading them, so '
                'the data workers start their random streams again (augmentations differ)'))
    elif isinstance(loop, EpochBasedTrainLoop):
        loader = loop.dataloader
        if loop.iter != loop.epoch * len(loader):
            return _not_exact(runner, source, f'it was saved at iteration {loop.iter}, inside '
                              f'epoch {loop.epoch + 1}, which mmengine trains again from its start')
        if getattr(loader, 'persistent_workers', False) and loader.num_workers > 0:
            return _not_exact(runner, source, 'persistent_workers=True: the data workers '
                              'start their random streams again (augmentations differ)')
        _restore_before_first_epoch(loop, state)
    else:
        return _not_exact(runner, source, f'{type(loop).__name__} is neither an iteration- nor '
                          'an epoch-based train loop of mmengine')


def _saving_state(save):
    signature = inspect.signature(save)

    @functools.wraps(save)
    def save_checkpoint(self, *args, **kwargs):
        # On every rank, before the save itself (rank 0 only, under @master_only).
        states = gather(self)
        bound = signature.bind(self, *args, **kwargs)
        meta = bound.arguments.get('meta')
        if meta is None or isinstance(meta, dict):
            bound.arguments['meta'] = {**(meta or {}), KEY: states}
        return save(*bound.args, **bound.kwargs)
    return save_checkpoint


def _keeping_loaded_state(load):
    @functools.wraps(load)
    def load_checkpoint(self, *args, **kwargs):
        checkpoint = load(self, *args, **kwargs)
        meta = checkpoint.get('meta') if isinstance(checkpoint, dict) else None
        setattr(self, _LOADED, meta.get(KEY, _MISSING) if isinstance(meta, dict) else _MISSING)
        return checkpoint
    return load_checkpoint


def _restoring_state(resume):
    @functools.wraps(resume)
    def resume_(self, filename, *args, **kwargs):
        setattr(self, _LOADED, _MISSING)
        result = resume(self, filename, *args, **kwargs)
        states = getattr(self, _LOADED, _MISSING)
        delattr(self, _LOADED)
        _arm(self, filename, states)
        return result
    return resume_


def _on_forked_state(build):
    @functools.wraps(build)
    def build_val_loop(self, loop):
        loop = build(self, loop)
        run = loop.run
        if getattr(run, '_inline_mm_forked', False):
            return loop
        runner = self

        @functools.wraps(run)
        def forked_run(*args, **kwargs):
            state = capture()
            setattr(runner, _TRAINING, state)
            try:
                return run(*args, **kwargs)
            finally:
                setattr(runner, _TRAINING, None)
                restore(state)
        forked_run._inline_mm_forked = True
        loop.run = forked_run
        return loop
    return build_val_loop


_WRAPPERS = (('save_checkpoint', _saving_state), ('load_checkpoint', _keeping_loaded_state),
             ('resume', _restoring_state), ('build_val_loop', _on_forked_state))


def install() -> None:
    """Save, restore and fork the random state with the Runner (idempotent)."""
    from mmengine.runner import Runner
    for name, wrap in _WRAPPERS:
        method = getattr(Runner, name)
        if not getattr(method, '_inline_mm_rng', False):
            wrapped = wrap(method)
            wrapped._inline_mm_rng = True
            setattr(Runner, name, wrapped)


def installed() -> bool:
    from mmengine.runner import Runner
    return all(getattr(getattr(Runner, name), '_inline_mm_rng', False) for name, _ in _WRAPPERS)


#: the row of the patch table this module switches on (python -m inline_mm.env)
PATCHES = (
    Patch('resume_random_state', "Runner's save_checkpoint, load_checkpoint, resume and "
          'build_val_loop: every rank\'s random state (torch CPU and CUDA, numpy, Python) in '
          'each checkpoint, restored at the first resumed iteration; validation on a copy',
          'a resumed run draws other numbers (drop-path, samplers, flips) and ends with other '
          'weights than the uninterrupted run', 'every mmengine', BY_ENGINE,
          always('mmengine saves no generator state'), installed, install),
)
