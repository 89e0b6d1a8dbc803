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
checkpoint could run code on load.  Upstream mmengine 0.10.7 has no ``_safe_torch_load``: it
calls ``torch.load`` plainly and is left alone (row ``strict_checkpoint_loading`` of
:data:`PATCHES` below).  The replacement calls
``torch.load`` as 0.10.7 does, with torch's default (``weights_only=True`` since torch 2.6)
and inline_mm's allowlist of mmengine's own types (:mod:`inline_mm.patches.mmengine_checkpoints`).
"""
import functools
import os.path as osp

from .patch import BY_ENGINE, Patch, always, mmengine_version

__all__ = ['PATCHES', 'install', 'installed', 'install_strict', 'installed_strict']


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


def _strict_torch_load(file, map_location=None, weights_only=None):
    """``_safe_torch_load`` without its ``weights_only=False`` retry: torch's own default and
    refusal (mmengine 0.10.7's behaviour), with mmengine's types allowlisted by inline_mm."""
    import torch
    from inline_mm.patches.mmengine_checkpoints import allow_mmengine_checkpoints
    allow_mmengine_checkpoints()
    if weights_only is None:
        return torch.load(file, map_location=map_location)
    return torch.load(file, map_location=map_location, weights_only=weights_only)


_strict_torch_load._inline_mm_strict = True


def install_strict():
    """Replace mmengine's retrying ``_safe_torch_load`` (idempotent; a loader without it, as
    upstream mmengine 0.10.7's, is left alone)."""
    from mmengine.runner import checkpoint as ckpt
    current = getattr(ckpt, '_safe_torch_load', None)
    if current is None or getattr(current, '_inline_mm_strict', False):
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


def _strict_needed():
    from mmengine.runner import checkpoint
    if getattr(checkpoint, '_safe_torch_load', None) is None:
        return False, f"mmengine {mmengine_version()}'s loader calls torch.load plainly"
    return True, (f"mmengine {mmengine_version()}'s loader (_safe_torch_load) retries a "
                  'refused checkpoint with weights_only=False')


#: the rows of the patch table this module switches on (python -m inline_mm.env)
PATCHES = (
    Patch('checkpoint_file_messages', "mmengine's local checkpoint loader (through "
          'CheckpointLoader.register_scheme): a file that is no checkpoint is named for what '
          'it is', "torch's message advises weights_only=False for an HTML page or an image",
          'every mmengine', BY_ENGINE,
          always("torch's message for a file that is no checkpoint advises weights_only=False"),
          installed, install),
    Patch('strict_checkpoint_loading', "mmengine's _safe_torch_load without its "
          'weights_only=False retry', 'any checkpoint torch refuses would run code on load',
          'onedl-mmengine >= 0.10.8', BY_ENGINE, _strict_needed, installed_strict,
          install_strict),
)
