"""Say what a file is when mmengine cannot load it as a checkpoint.

``load_from``, ``--resume PATH`` and the checkpoint argument of ``test.py`` all reach
``torch.load`` through mmengine's local-file loader. For a file that is no checkpoint
(a web page saved by a failed download, an image, a file cut short) torch answers
with its advice to retry with ``weights_only=False``: wrong for such a file, and
unsafe advice for any file one did not write. :func:`install` registers, through
mmengine's public ``CheckpointLoader.register_scheme``, a local loader that reads
files exactly as mmengine's does and, when that fails on a file that is not a
readable ``torch.save`` archive, raises :class:`~inline_mm.models.checkpoint.CheckpointError`
saying what the file is and what to do. Torch's refusal of pickled objects outside
its allowlist in an intact checkpoint passes through unchanged.

:func:`install_strict` keeps that refusal where mmengine itself would overrule it:
onedl-mmengine (0.10.8 and later; 0.10.12 measured) loads through ``_safe_torch_load``, which
retries every checkpoint torch refuses with ``weights_only=False`` (logging a warning), so any
checkpoint could run code on load.  Decided by a feature check (:func:`needed_strict`: does
mmengine's local loader load a file holding an object outside the allowlist?); upstream
mmengine 0.10.7 calls ``torch.load`` plainly and is left alone.  The replacement calls
``torch.load`` as 0.10.7 does, with torch's default (``weights_only=True`` since torch 2.6)
and inline_mm's allowlist of mmengine's own types (:mod:`inline_mm.compat`).
"""
import contextlib
import functools
import io
import os
import os.path as osp
import tempfile

__all__ = ['install', 'installed', 'needed', 'install_strict', 'installed_strict',
           'needed_strict']


def _explaining(load):
    @functools.wraps(load)
    def load_from_local(filename, map_location):
        try:
            return load(filename, map_location)
        except Exception as e:
            path = osp.expanduser(filename)
            if not osp.isfile(path):
                raise
            from inline_mm.models.checkpoint import CheckpointError, unreadable_message
            message = unreadable_message(path, e)
            if message is None:
                raise
            # ``from None``: the torch error below repeats its weights_only=False advice.
            raise CheckpointError(message) from None

    load_from_local._inline_mm_explains = True
    return load_from_local


def needed():
    """``(needed, why)``: the explanation is inline_mm's own, on every stack."""
    return True, "torch's message for a file that is no checkpoint advises weights_only=False"


class _NotAllowlisted:
    """What the feature check pickles: a plain class that no allowlist names."""


_strict_needed = None


def needed_strict():
    """Feature check: ``(needed, why)``; True when mmengine's local loader returns a
    checkpoint that holds an object outside torch's allowlist (measured once per process
    with a small temporary file; loading it runs no code beyond creating the empty object)."""
    global _strict_needed
    if _strict_needed is None:
        import torch
        from mmengine.runner import checkpoint as ckpt
        if not hasattr(torch.serialization, 'add_safe_globals'):
            _strict_needed = (False, 'this torch has no weights_only allowlist')
            return _strict_needed
        fd, path = tempfile.mkstemp(suffix='.pth')
        os.close(fd)
        try:
            torch.save({'probe': _NotAllowlisted()}, path)
            quiet = io.StringIO()
            try:
                with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
                    ckpt.load_from_local(path, 'cpu')
            except Exception:
                _strict_needed = (False, "mmengine's loader keeps torch's refusal")
            else:
                _strict_needed = (True, "mmengine's loader retries refused checkpoints with "
                                        'weights_only=False')
        finally:
            os.remove(path)
            # onedl-mmengine's loader leaves its allowlist context by *removing* the types it
            # names from torch's global allowlist, ours among them: put them back
            from inline_mm.compat import allow_mmengine_checkpoints
            allow_mmengine_checkpoints()
    return _strict_needed


def _strict_torch_load(file, map_location=None, weights_only=None):
    """``_safe_torch_load`` without its ``weights_only=False`` retry: torch's own default and
    refusal (mmengine 0.10.7's behaviour), with mmengine's types allowlisted by inline_mm."""
    import torch
    from inline_mm.compat import allow_mmengine_checkpoints
    allow_mmengine_checkpoints()
    if weights_only is None:
        return torch.load(file, map_location=map_location)
    return torch.load(file, map_location=map_location, weights_only=weights_only)


_strict_torch_load._inline_mm_strict = True


def install_strict():
    """Replace mmengine's retrying ``_safe_torch_load`` (idempotent; only where
    :func:`needed_strict` says so)."""
    from mmengine.runner import checkpoint as ckpt
    current = getattr(ckpt, '_safe_torch_load', None)
    if current is None or getattr(current, '_inline_mm_strict', False):
        return
    if not needed_strict()[0]:
        return
    ckpt._inline_mm_original_safe_torch_load = current
    ckpt._safe_torch_load = _strict_torch_load


def installed_strict() -> bool:
    from mmengine.runner import checkpoint as ckpt
    return getattr(getattr(ckpt, '_safe_torch_load', None), '_inline_mm_strict', False)


def install():
    """Register the explaining local loader with mmengine (idempotent)."""
    from mmengine.runner.checkpoint import CheckpointLoader
    load = CheckpointLoader._get_checkpoint_loader('')
    if not getattr(load, '_inline_mm_explains', False):
        CheckpointLoader.register_scheme(prefixes='', loader=_explaining(load), force=True)


def installed() -> bool:
    from mmengine.runner.checkpoint import CheckpointLoader
    return getattr(CheckpointLoader._get_checkpoint_loader('/any/local/path'),
                   '_inline_mm_explains', False)
