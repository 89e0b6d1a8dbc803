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
"""
import functools
import os.path as osp

__all__ = ['install', 'installed']


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
