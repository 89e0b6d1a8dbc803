"""Import hook: answer ``import mmcv._ext`` with inline_mm's torchvision stand-in when mmcv has
no compiled extension (mmcv-lite).

Why a hook at interpreter start: ``from mmdet.apis import ...``, ``import mmseg.utils`` and the
stock tools import ``mmcv.ops`` (which imports ``mmcv._ext``) before any config or user code
could import ``inline_mm``.  ``tools/dev/setup_env.sh`` therefore writes one line into the
environment's site-packages, ``inline_mm_mmcv_ext.pth``::

    import importlib.util as u; u.find_spec('_inline_mm_mmcv_hook') and __import__(...).install()

What it touches: it appends one finder to the *end* of ``sys.meta_path``.  Python asks it only
after every normal finder has failed, so a compiled ``mmcv._ext`` always wins, and it answers
for the single name ``mmcv._ext`` and nothing else.  It imports only the standard library;
torch and torchvision load when mmcv loads its ops.  If inline_mm has been uninstalled it finds
nothing and does nothing.

Remove it: ``python -m _inline_mm_mmcv_hook uninstall`` (or delete the ``.pth`` file), or set
``INLINE_MM_MMCV_FALLBACK=0`` to switch it off for one process.
"""
import importlib
import importlib.abc
import importlib.util
import os
import sys
import sysconfig

TARGET = 'mmcv._ext'
PTH_NAME = 'inline_mm_mmcv_ext.pth'
# Guarded, so that a left-over .pth does nothing once inline_mm is uninstalled.
PTH_LINE = ("import importlib.util as u; u.find_spec('_inline_mm_mmcv_hook') and "
            "__import__('_inline_mm_mmcv_hook').install()\n")


class MmcvExtFallbackFinder(importlib.abc.MetaPathFinder):
    """Finds ``mmcv._ext`` in ``inline_mm/mmcv_ext.py`` when nothing else can."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != TARGET or os.environ.get('INLINE_MM_MMCV_FALLBACK', '1') == '0':
            return None
        source = fallback_path()
        if source is None:
            return None
        return importlib.util.spec_from_file_location(TARGET, source)


def fallback_path():
    """Path of ``inline_mm/mmcv_ext.py`` without importing ``inline_mm`` (whose import would
    register models while mmcv is half-imported); None when inline_mm is not installed."""
    try:
        spec = importlib.util.find_spec('inline_mm')
    except (ImportError, ValueError):
        return None
    for base in (spec.submodule_search_locations or []) if spec else []:
        candidate = os.path.join(base, 'mmcv_ext.py')
        if os.path.isfile(candidate):
            return candidate
    return None


def install() -> None:
    """Append the finder once (idempotent)."""
    if not any(isinstance(f, MmcvExtFallbackFinder) for f in sys.meta_path):
        sys.meta_path.append(MmcvExtFallbackFinder())


def backend() -> str:
    """'compiled', 'fallback' or 'none': what answers ``import mmcv._ext`` in this process."""
    try:
        module = importlib.import_module(TARGET)
    except ImportError:
        return 'none'
    return 'fallback' if getattr(module, 'FALLBACK_NAME', None) else 'compiled'


def pth_path(site_packages=None) -> str:
    return os.path.join(site_packages or sysconfig.get_paths()['purelib'], PTH_NAME)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    cmd = argv[0] if argv else 'status'
    path = pth_path()
    if cmd == 'install':
        with open(path, 'w') as f:
            f.write(PTH_LINE)
        print(f'wrote {path}')
    elif cmd == 'uninstall':
        if os.path.exists(path):
            os.remove(path)
            print(f'removed {path}')
        else:
            print(f'nothing to remove ({path} does not exist)')
    elif cmd == 'status':
        print(f'{path}: {"present" if os.path.exists(path) else "absent"}; '
              f'mmcv._ext: {backend()}')
    else:
        print('usage: python -m _inline_mm_mmcv_hook [install|uninstall|status]', file=sys.stderr)
        return 2
    return 0


if __name__ == '__main__':
    sys.exit(main())
