"""What a row of the patch table is (:class:`Patch`, its switches :data:`AT_START`,
:data:`AT_IMPORT`, :data:`BY_ENGINE`) and the helpers every row's module uses: version checks
of mmengine, wrapping a function once, the interpreter-start hook. Imports nothing of mmengine.
"""
import functools
import re
from dataclasses import dataclass
from typing import Callable, Optional, Tuple

__all__ = ['Patch', 'AT_START', 'AT_IMPORT', 'BY_ENGINE', 'MMENGINE_FIXED_IN', 'mmengine_version',
           'before_fixed_mmengine', 'always', 'wrap_once', 'wrapped', 'start_hook']

AT_START = 'interpreter start'
AT_IMPORT = 'import inline_mm'
BY_ENGINE = 'inline_mm.engine.install()'

#: mmengine versions with the faults some rows fix: every release so far (upstream 0.10.7,
#: the last; onedl-mmengine 0.10.12). A release from 0.11 on is assumed fixed until measured.
MMENGINE_FIXED_IN = (0, 11)


@dataclass(frozen=True)
class Patch:
    """One change to another package.

    Attributes:
        name (str): Short name (``python -m inline_mm.env`` prints it).
        replaces (str): What of which package it replaces or extends.
        reason (str): What goes wrong without it.
        versions (str): The versions it applies to.
        switched_on_by (str): :data:`AT_START`, :data:`AT_IMPORT` or :data:`BY_ENGINE`.
        needed (callable): ``() -> (bool, why)``, the feature check of the installed stack.
        active (callable): ``() -> bool``, whether it is on in this process.
        install (callable, optional): Switches it on (idempotent).
        switch_off (str): ``VAR=0``, the environment setting that keeps an interpreter-start
            row off.
    """
    name: str
    replaces: str
    reason: str
    versions: str
    switched_on_by: str
    needed: Callable[[], Tuple[bool, str]]
    active: Callable[[], bool]
    install: Optional[Callable[[], None]] = None
    switch_off: str = ''


def _version(text: str) -> tuple:
    return tuple(int(n) for n in re.findall(r'\d+', text)[:3])


def mmengine_version() -> str:
    import mmengine
    return mmengine.__version__


def before_fixed_mmengine(fault: str) -> Callable[[], Tuple[bool, str]]:
    def needed():
        v = mmengine_version()
        if _version(v) < MMENGINE_FIXED_IN:
            return True, f'mmengine {v}: {fault}'
        return False, f'mmengine {v} is past the releases with this fault'
    return needed


def always(why: str) -> Callable[[], Tuple[bool, str]]:
    return lambda: (True, why)


def wrap_once(owner, name: str, marker: str, make: Callable, static: bool = False) -> None:
    """Replace ``owner.name`` by ``make(original)`` unless it is already marked ``marker``:
    the wrapper takes the original's name, docstring and markers and adds its own, so that
    several rows can wrap one function, each once (``static``: set as a ``staticmethod``)."""
    original = getattr(owner, name)
    if getattr(original, marker, False):
        return
    wrapper = functools.wraps(original)(make(original))
    setattr(wrapper, marker, True)
    setattr(owner, name, staticmethod(wrapper) if static else wrapper)


def wrapped(owner, name: str, marker: str) -> bool:
    """Whether :func:`wrap_once` has wrapped ``owner.name`` with ``marker``."""
    return getattr(getattr(owner, name), marker, False)


def start_hook():
    """The interpreter-start hook module, or None when it is not importable."""
    try:
        import _inline_mm_mmcv_hook as hook
    except ImportError:
        return None
    return hook
