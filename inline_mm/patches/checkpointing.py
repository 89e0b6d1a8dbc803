"""Checkpoints that survive a training process killed at any moment.

What mmengine 0.10.7 already gets right (verified by
``tests/test_reliability_training.py``, which kills a run with SIGKILL in the middle of
writing a checkpoint): it writes ``work_dir/last_checkpoint`` only after the checkpoint
file is complete, so ``--resume`` never picks a half-written file.

What it gets wrong, and this module fixes (rows ``checkpoint_prune_order`` and
``resume_fallback`` of :data:`PATCHES` below):

* With ``max_keep_ckpts`` set, ``CheckpointHook`` deletes the oldest kept checkpoint
  *before* writing the new one.  With ``max_keep_ckpts=1`` (popular for saving disk) a
  kill during the save leaves only a truncated file while ``last_checkpoint`` still
  names the deleted one: every iteration of the run is lost.  :func:`install_prune` defers
  the deletion until the new checkpoint and ``last_checkpoint`` are written; the hook's
  bookkeeping (which steps are kept, as stored in the checkpoint) is unchanged.  The
  best checkpoint (``save_best``) is replaced the same way: old one deleted last.  The
  deletions still to make are noted in the message hub, which the new checkpoint holds:
  a run resumed from a checkpoint whose process died before deleting makes them at its
  next save, so no file stays beside ``max_keep_ckpts``' for good.
* ``last_checkpoint`` is rewritten in place (truncate, then write), and a work dir
  may hold a checkpoint that was cut short (disk full, a copy interrupted).  When
  ``--resume`` finds ``last_checkpoint`` empty, or naming a missing or incomplete
  file, :func:`install_fallback` makes it fall back to the newest complete
  ``iter_*.pth`` / ``epoch_*.pth`` in the work dir, with a warning naming both; with none
  it fails with a clear message instead of starting over or crashing on an empty path.
  When ``last_checkpoint`` names a complete file but a complete checkpoint of the same
  kind beside it has a larger step and was written no earlier (the process was killed
  after saving it and before recording it), ``--resume`` takes that one, with a warning.
"""
import functools
import logging
import os
import os.path as osp
import re
import zipfile
from typing import List, Optional

from .patch import BY_ENGINE, Patch, always, before_fixed_mmengine

__all__ = ['PATCHES', 'install_prune', 'installed_prune', 'install_fallback', 'installed_fallback',
           'is_complete_checkpoint', 'complete_checkpoints', 'find_resumable']

_CKPT_NAME = re.compile(r'^(iter|epoch)_(\d+)\.pth$')
#: the message hub's record of the checkpoints a save deletes once it is complete
PENDING_REMOVALS = 'inline_mm_pending_removals'
#: the CheckpointHook methods that delete an old file before saving
_SAVES = ('_save_checkpoint_with_step', '_save_best_checkpoint')


def is_complete_checkpoint(path: str) -> bool:
    """True when ``path`` is a whole file in torch's zip format.

    ``torch.save`` writes the zip's central directory last, so a file cut short
    anywhere fails this check; it reads only the end of the file.
    """
    try:
        return osp.isfile(path) and zipfile.is_zipfile(path)
    except OSError:
        return False


def complete_checkpoints(work_dir: str) -> List[str]:
    """Complete ``iter_N.pth`` / ``epoch_N.pth`` files in ``work_dir``, oldest first
    (by N; iteration checkpoints after epoch ones)."""
    if not osp.isdir(work_dir):
        return []
    found = []
    for name in os.listdir(work_dir):
        m = _CKPT_NAME.match(name)
        if m and is_complete_checkpoint(osp.join(work_dir, name)):
            found.append((m.group(1) == 'iter', int(m.group(2)), osp.join(work_dir, name)))
    return [p for _, _, p in sorted(found)]


def _is_local(path: str) -> bool:
    return '://' not in path


def _newer_complete(recorded: str) -> Optional[str]:
    """The newest complete checkpoint beside ``recorded`` (an ``iter_N`` / ``epoch_N`` file)
    of the same kind with a larger N and no earlier modification time, or None."""
    m = _CKPT_NAME.match(osp.basename(recorded))
    if m is None:
        return None
    kind, step = m.group(1), int(m.group(2))
    since = os.stat(recorded).st_mtime_ns
    newer = [p for p in complete_checkpoints(osp.dirname(recorded) or '.')
             if _CKPT_NAME.match(osp.basename(p)).group(1) == kind
             and int(_CKPT_NAME.match(osp.basename(p)).group(2)) > step
             and os.stat(p).st_mtime_ns >= since]
    return newer[-1] if newer else None


def find_resumable(work_dir: str, recorded: Optional[str], warn=None) -> Optional[str]:
    """The checkpoint ``--resume`` should use, given what ``last_checkpoint`` says.

    Args:
        work_dir (str): The run's work dir.
        recorded (str, optional): Contents of ``last_checkpoint`` (None: no such file).
        warn (callable, optional): Called with a message when not resuming from
            ``recorded``. Default: None (silent).

    Returns:
        str or None: ``recorded`` when it is usable and no complete checkpoint beside it is
        newer (a larger step, written no earlier: the run was killed after saving it and
        before recording it); else the newest complete checkpoint; None when there is no
        ``last_checkpoint`` (a fresh run).

    Raises:
        FileNotFoundError: ``last_checkpoint`` exists but nothing usable does.
    """
    if recorded is None:
        return None
    if recorded and not _is_local(recorded):
        return recorded
    if recorded and is_complete_checkpoint(recorded):
        newer = _newer_complete(recorded)
        if newer is None:
            return recorded
        if warn is not None:
            warn(f'{osp.join(work_dir, "last_checkpoint")} names {recorded}, but {newer} is newer '
                 'and complete (the run was killed after saving it, before recording it); '
                 f'resuming from {newer}')
        return newer
    why = ('is empty' if not recorded else
           f'names {recorded}, which ' + ('is incomplete (the run was probably killed '
                                          'while saving it)' if osp.exists(recorded)
                                          else 'does not exist'))
    candidates = complete_checkpoints(work_dir)
    if not candidates:
        raise FileNotFoundError(
            f'cannot resume: {osp.join(work_dir, "last_checkpoint")} {why}, and {work_dir} '
            'holds no complete iter_*.pth / epoch_*.pth. Start without --resume, or pass a '
            'checkpoint explicitly: --resume PATH')
    if warn is not None:
        warn(f'{osp.join(work_dir, "last_checkpoint")} {why}; resuming from the newest '
             f'complete checkpoint instead: {candidates[-1]}')
    return candidates[-1]


class _DeferRemoval:
    """Stands in for ``CheckpointHook.file_backend`` during one save: forwards
    everything, but records ``remove`` / ``rmtree`` calls to run after the save, and notes
    their paths in the runner's message hub (saved with the checkpoint) meanwhile."""

    def __init__(self, backend, note):
        self._backend = backend
        self._note = note
        self.pending = []

    def remove(self, path):
        self.pending.append(path)
        self._note(self.pending)

    def rmtree(self, path):
        self.remove(path)

    def __getattr__(self, name):
        return getattr(self._backend, name)


def _remove(backend, path):
    if backend.isfile(path):
        backend.remove(path)
    elif backend.isdir(path):
        backend.rmtree(path)


def _prune_after(save):
    @functools.wraps(save)
    def save_then_prune(self, runner, *args, **kwargs):
        from mmengine.dist import is_main_process
        from mmengine.logging import print_log
        hub = runner.message_hub
        # Deletions a killed process noted and never made (the checkpoint resumed from
        # holds them): made after this save, with this save's own.
        left = list(hub.get_info(PENDING_REMOVALS, None) or [])
        backend = self.file_backend
        deferred = _DeferRemoval(backend, lambda paths: hub.update_info(
            PENDING_REMOVALS, left + list(paths)))
        self.file_backend = deferred
        try:
            result = save(self, runner, *args, **kwargs)
        finally:
            self.file_backend = backend
        # Reached only once the new checkpoint (and last_checkpoint) are written.
        if is_main_process():
            for path in left:
                if backend.exists(path):
                    print_log(f'removing {path}: the process that saved the checkpoint this run '
                              'resumed from was killed before deleting it (max_keep_ckpts)',
                              logger='current', level=logging.WARNING)
            for path in left + deferred.pending:
                _remove(backend, path)
        hub.update_info(PENDING_REMOVALS, [])
        return result

    save_then_prune._inline_mm_safe = True
    return save_then_prune


def install_prune():
    """Make ``CheckpointHook`` delete outdated checkpoints after the save (idempotent)."""
    from mmengine.hooks import CheckpointHook

    # The periodic save and the best-checkpoint save both delete an old file first.
    for name in _SAVES:
        method = getattr(CheckpointHook, name)
        if not getattr(method, '_inline_mm_safe', False):
            setattr(CheckpointHook, name, _prune_after(method))


def installed_prune() -> bool:
    from mmengine.hooks import CheckpointHook
    return all(getattr(getattr(CheckpointHook, n), '_inline_mm_safe', False) for n in _SAVES)


def install_fallback():
    """Make ``--resume`` fall back to the newest complete checkpoint (idempotent)."""
    import mmengine.runner.runner as runner_module
    from mmengine.logging import print_log

    find = runner_module.find_latest_checkpoint
    if not getattr(find, '_inline_mm_safe', False):
        @functools.wraps(find)
        def find_latest_checkpoint(path):
            return find_resumable(
                path, find(path),
                warn=lambda msg: print_log(msg, logger='current', level=logging.WARNING))

        find_latest_checkpoint._inline_mm_safe = True
        runner_module.find_latest_checkpoint = find_latest_checkpoint


def installed_fallback() -> bool:
    import mmengine.runner.runner as runner_module
    return getattr(runner_module.find_latest_checkpoint, '_inline_mm_safe', False)


#: the rows of the patch table this module switches on (python -m inline_mm.env)
PATCHES = (
    Patch('checkpoint_prune_order', 'CheckpointHook: old checkpoints deleted after the new '
          'one is written',
          'with max_keep_ckpts, a kill while saving loses every checkpoint', 'mmengine < 0.11',
          BY_ENGINE, before_fixed_mmengine('CheckpointHook deletes old checkpoints first'),
          installed_prune, install_prune),
    Patch('resume_fallback', "mmengine's find_latest_checkpoint: past an empty last_checkpoint "
          'or a missing or cut file, to the newest complete one',
          '--resume crashes or starts over', 'every mmengine', BY_ENGINE,
          always("mmengine resumes only from what last_checkpoint names"),
          installed_fallback, install_fallback),
)
