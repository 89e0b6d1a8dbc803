"""Data workers that end with the training process that started them.

A dataloader worker notices that its parent is gone only when it waits for work (torch's
watchdog polls every 5 s there).  A worker busy in a slow sample, or blocked writing a batch
into a full pipe, outlives a training process killed with SIGKILL by minutes, holding its
memory (about 590 MB each in the demo run).  The row ``workers_die_with_parent`` of
:data:`PATCHES` below has the workers of every loader ``Runner.build_dataloader`` returns
start with Linux's ``prctl(PR_SET_PDEATHSIG, SIGKILL)``: the kernel kills the worker when
the thread that started it ends, which is the training process's main thread in mmengine's
loops (a loader iterated from another thread would lose its workers when that thread ends).
The loader's own ``worker_init_fn`` (mmengine's seeding, or the config's) runs after it.

Other platforms have no such call (macOS has no parent-death signal, Windows kills no
child with its parent): there the row is off and torch's watchdog is what ends a worker.
"""
import ctypes
import os
import signal
import sys

from .patch import BY_ENGINE, Patch, wrap_once, wrapped

__all__ = ['PATCHES', 'DieWithParent', 'install', 'installed']

#: linux/prctl.h
PR_SET_PDEATHSIG = 1


class DieWithParent:
    """A ``worker_init_fn`` that has the kernel kill the worker when its parent ends, then
    calls ``init_fn`` (the loader's own, if any). Picklable, for the ``spawn`` start method."""

    def __init__(self, init_fn=None, parent: int = None):
        self.init_fn = init_fn
        self.parent = os.getpid() if parent is None else parent

    def __call__(self, worker_id):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f'prctl(PR_SET_PDEATHSIG) failed: {os.strerror(err)}')
        if os.getppid() != self.parent:
            # The parent ended before the call above: nobody would kill this worker.
            os.kill(os.getpid(), signal.SIGKILL)
        if self.init_fn is not None:
            self.init_fn(worker_id)


def _needed():
    if sys.platform.startswith('linux'):
        return True, 'Linux: a busy data worker outlives its killed parent for minutes'
    return False, f'{sys.platform} has no parent-death signal (torch\'s watchdog ends idle workers)'


def _with_workers_dying(build):
    def build_dataloader(*args, **kwargs):
        loader = build(*args, **kwargs)
        init_fn = getattr(loader, 'worker_init_fn', None)
        if getattr(loader, 'num_workers', 0) > 0 and not isinstance(init_fn, DieWithParent):
            loader.worker_init_fn = DieWithParent(init_fn)
        return loader
    return build_dataloader


def install():
    """Make the workers of ``Runner.build_dataloader``'s loaders die with their parent
    (idempotent)."""
    from mmengine.runner import Runner
    wrap_once(Runner, 'build_dataloader', '_inline_mm_workers', _with_workers_dying, static=True)


def installed() -> bool:
    from mmengine.runner import Runner
    return wrapped(Runner, 'build_dataloader', '_inline_mm_workers')


#: the row of the patch table this module switches on (python -m inline_mm.env)
PATCHES = (
    Patch('workers_die_with_parent', "Runner.build_dataloader: the loader's worker_init_fn "
          'first asks the kernel to kill the worker with its parent (prctl PR_SET_PDEATHSIG)',
          'a data worker of a killed run lives on for minutes, holding its memory',
          'every mmengine, on Linux', BY_ENGINE, _needed, installed, install),
)
