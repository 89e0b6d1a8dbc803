"""Interpreter-start hook of inline_mm, two jobs, each switchable by an environment variable:

1. ``import mmcv._ext`` answered by inline_mm's torchvision stand-in
   (``inline_mm/patches/mmcv_ext.py``) when mmcv has no compiled extension (mmcv-lite).  Off:
   ``INLINE_MM_MMCV_FALLBACK=0``. Once ``mmcv.ops`` has been imported with the stand-in, the op
   modules it cannot serve (deformable convolution, CARAFE, ... : ``mmcv_ext.UNSERVED_MODULES``)
   refuse to be built, naming the fix, so that such a model fails as it is built, not at its first
   iteration.
2. ``inline_mm::path`` config bases (``_base_ = 'inline_mm::inline_swin/xxx.py'``) resolved like
   ``mmdet::`` ones, to ``<inline_mm>/.mim/configs/path``.  mmengine accepts ``pkg::`` only for
   the packages of ``mmengine.config.utils.MODULE2PACKAGE``, a fixed table of OpenMMLab projects;
   right after mmengine has imported that module, the hook adds ``'inline_mm': 'inline_mm'`` to
   it.  Off: ``INLINE_MM_CONFIG_BASES=0`` (then name the base by its path).  In the same
   place, where a table entry names a distribution that is not installed although its import
   name is (``mmseg`` -> ``mmsegmentation`` with the onedl fork ``onedl-mmsegmentation``), the
   entry is re-pointed at the import name so that ``mmseg::`` bases resolve
   (:func:`_repoint_scopes`; upstream mmsegmentation needs nothing).  Off:
   ``INLINE_MM_SCOPE_FIX=0``.

Why at interpreter start: ``from mmdet.apis import ...``, ``import mmseg.utils`` and the stock
tools import ``mmcv.ops`` (which imports ``mmcv._ext``), and a config names its bases, before any
config or user code could import ``inline_mm``.  The wheel therefore carries one line for the
environment's site-packages, ``inline_mm_mmcv_ext.pth`` (``pip install`` puts it there;
``tools/dev/setup_env.sh`` writes it for an editable install with
``python -m _inline_mm_mmcv_hook install``)::

    import importlib.util as u; u.find_spec('_inline_mm_mmcv_hook') and __import__(...).install()

What it touches: three finders on ``sys.meta_path``, each answering for one module name.  The
``mmcv._ext`` one sits at the *end*: Python asks it only after every normal finder has failed, so a
compiled ``mmcv._ext`` always wins.  The ``mmengine.config.utils`` one sits at the front and finds
the module with the finders behind it, unchanged; it only adds the table entry after the module has
run.  The ``mmcv.ops`` one, also at the front, likewise acts only after that package has run, and
only when the stand-in answered ``mmcv._ext``.  The hook imports only the standard library; torch
and torchvision load when mmcv loads its ops.  If inline_mm has been uninstalled it finds nothing
and does nothing.

Remove it: ``python -m _inline_mm_mmcv_hook uninstall`` (or delete the ``.pth`` file; ``pip
uninstall inline_mm`` removes the one the wheel brought).
"""
import importlib
import importlib.abc
import importlib.util
import os
import sys
import sysconfig

TARGET = 'mmcv._ext'
#: the module holding mmengine's table of packages that ``pkg::`` bases may name
CONFIG_UTILS = 'mmengine.config.utils'
PTH_NAME = 'inline_mm_mmcv_ext.pth'
# Guarded, so that a left-over .pth does nothing once inline_mm is uninstalled.
PTH_LINE = ("import importlib.util as u; u.find_spec('_inline_mm_mmcv_hook') and "
            "__import__('_inline_mm_mmcv_hook').install()\n")


class MmcvExtFallbackFinder(importlib.abc.MetaPathFinder):
    """Finds ``mmcv._ext`` in ``inline_mm/patches/mmcv_ext.py`` when nothing else can."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != TARGET or os.environ.get('INLINE_MM_MMCV_FALLBACK', '1') == '0':
            return None
        source = fallback_path()
        if source is None:
            return None
        return importlib.util.spec_from_file_location(TARGET, source)


class _AfterExec(importlib.abc.Loader):
    """Runs the real loader, then ``then(module)``."""

    def __init__(self, loader, then):
        self.loader, self.then = loader, then

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        # the module keeps its own loader (inspect, reload and pickling read it)
        module.__loader__ = module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        self.then(module)


#: config scopes whose ``MODULE2PACKAGE`` entry this process re-pointed at the import name
#: (:func:`_repoint_scopes`); ``python -m inline_mm.env`` reports them
REPOINTED_SCOPES = {}


def _distribution_exists(name):
    from importlib.metadata import PackageNotFoundError, distribution
    try:
        distribution(name)
    except PackageNotFoundError:
        return False
    return True


def unresolved_scopes(table=None):
    """``{scope: package}`` of ``MODULE2PACKAGE`` entries that mmengine cannot resolve here
    and the import name can: the scope's module is importable while the table's package is
    neither an installed distribution nor an importable module (:func:`_repoint_scopes`).
    Reads metadata and finders only; ``table`` defaults to mmengine's, as imported now."""
    if table is None:
        module = sys.modules.get(CONFIG_UTILS)
        if module is None:
            return {}
        table = dict(module.MODULE2PACKAGE)
        table.update({s: p for s, p in REPOINTED_SCOPES.items() if s in table})
    found = {}
    for scope, package in table.items():
        if scope == package or scope == 'inline_mm':
            continue
        try:
            if importlib.util.find_spec(scope) is None:
                continue                    # that project is not here at all
            if importlib.util.find_spec(package) is not None or _distribution_exists(package):
                continue                    # mmengine's own look-up works
        except (ImportError, ValueError):
            continue
        found[scope] = package
    return found


def _repoint_scopes(table):
    """``mmseg::`` bases where mmseg comes from another distribution than ``mmsegmentation``.

    mmengine (upstream 0.10.7 and onedl-mmengine 0.10.12 alike) resolves ``scope::path`` by
    looking up ``MODULE2PACKAGE[scope]`` as a *distribution* name, then as a module name:
    ``mmseg`` -> ``mmsegmentation``.  The onedl fork is the distribution
    ``onedl-mmsegmentation`` with the import name ``mmseg``, so both look-ups fail ("mmsegmentation
    is not installed") and no ``mmseg::`` base resolves.  Feature check, per scope: the
    table's name is neither an installed distribution nor an importable module, while the scope
    itself is importable -> the entry becomes the import name (mmengine's fallback then finds
    the package by ``find_spec``).  Where the named distribution is installed (upstream
    mmsegmentation 1.2.2) nothing changes.  ``mmdet`` needs nothing: its entry is its import name.
    """
    for scope, package in unresolved_scopes(table).items():
        table[scope] = scope
        REPOINTED_SCOPES[scope] = package


def _register_config_scope(module):
    module.MODULE2PACKAGE.setdefault('inline_mm', 'inline_mm')
    if os.environ.get('INLINE_MM_SCOPE_FIX', '1') != '0':
        _repoint_scopes(module.MODULE2PACKAGE)


def _find_then(finder, fullname, path, target, then):
    """The spec the finders behind ``finder`` give ``fullname``, its loader running
    ``then(module)`` after the module (None when none finds it)."""
    for other in sys.meta_path:
        if other is finder or not hasattr(other, 'find_spec'):
            continue
        spec = other.find_spec(fullname, path, target)
        if spec is not None:
            if spec.loader is not None and hasattr(spec.loader, 'exec_module'):
                spec.loader = _AfterExec(spec.loader, then)
            return spec
    return None


class ConfigScopeFinder(importlib.abc.MetaPathFinder):
    """Lets mmengine accept ``inline_mm::`` bases: adds inline_mm to ``MODULE2PACKAGE`` once
    ``mmengine.config.utils`` has been imported by the normal finders."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != CONFIG_UTILS or os.environ.get('INLINE_MM_CONFIG_BASES', '1') == '0':
            return None
        if importlib.util.find_spec('inline_mm') is None:
            return None
        return _find_then(self, fullname, path, target, _register_config_scope)


#: the package whose import makes mmcv's op modules exist
OPS = 'mmcv.ops'


def _refuse_unserved(module=None):
    """With the stand-in as ``mmcv._ext``, its unserved op modules refuse to be built."""
    ext = sys.modules.get(TARGET)
    if getattr(ext, 'FALLBACK_NAME', None):
        ext.refuse_unserved()


class OpsGuardFinder(importlib.abc.MetaPathFinder):
    """Once ``mmcv.ops`` has run (found by the finders behind this one, unchanged), the op
    modules the stand-in cannot serve refuse to be built (:func:`_refuse_unserved`)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != OPS or os.environ.get('INLINE_MM_MMCV_FALLBACK', '1') == '0':
            return None
        return _find_then(self, fullname, path, target, _refuse_unserved)


def fallback_path():
    """Path of ``inline_mm/patches/mmcv_ext.py`` without importing ``inline_mm`` (whose import
    would register models while mmcv is half-imported); None when inline_mm is not installed."""
    try:
        spec = importlib.util.find_spec('inline_mm')
    except (ImportError, ValueError):
        return None
    for base in (spec.submodule_search_locations or []) if spec else []:
        candidate = os.path.join(base, 'patches', 'mmcv_ext.py')
        if os.path.isfile(candidate):
            return candidate
    return None


def install() -> None:
    """Put the finders in place once (idempotent)."""
    if not any(isinstance(f, MmcvExtFallbackFinder) for f in sys.meta_path):
        sys.meta_path.append(MmcvExtFallbackFinder())
    if not any(isinstance(f, OpsGuardFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, OpsGuardFinder())
        if OPS in sys.modules and os.environ.get('INLINE_MM_MMCV_FALLBACK', '1') != '0':
            _refuse_unserved()              # imported before the hook
    if not any(isinstance(f, ConfigScopeFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, ConfigScopeFinder())
        # imported before the hook (e.g. install() called by hand): register now
        if CONFIG_UTILS in sys.modules and os.environ.get('INLINE_MM_CONFIG_BASES', '1') != '0':
            _register_config_scope(sys.modules[CONFIG_UTILS])


def compiled_ext_present() -> bool:
    """Whether mmcv has a compiled ``mmcv._ext``, found by the finders other than the fallback's
    (nothing is imported; once ``mmcv._ext`` is imported, the module says)."""
    if TARGET in sys.modules:
        return getattr(sys.modules[TARGET], 'FALLBACK_NAME', None) is None
    try:
        spec = importlib.util.find_spec('mmcv')
    except (ImportError, ValueError):
        return False
    where = list(spec.submodule_search_locations or []) if spec is not None else []
    for finder in sys.meta_path if where else []:
        if isinstance(finder, (MmcvExtFallbackFinder, ConfigScopeFinder)) or \
                not hasattr(finder, 'find_spec'):
            continue
        try:
            if finder.find_spec(TARGET, where) is not None:
                return True
        except (ImportError, ValueError):
            continue
    return False


def fallback_active() -> bool:
    """Whether ``import mmcv._ext`` gives (or has given) the torchvision stand-in here."""
    if TARGET in sys.modules:
        return getattr(sys.modules[TARGET], 'FALLBACK_NAME', None) is not None
    return (any(isinstance(f, MmcvExtFallbackFinder) for f in sys.meta_path)
            and os.environ.get('INLINE_MM_MMCV_FALLBACK', '1') != '0'
            and fallback_path() is not None and not compiled_ext_present())


def ops_guard_active() -> bool:
    """Whether the op modules the stand-in cannot serve refuse to be built here (or will, as
    ``mmcv.ops`` is imported with the stand-in)."""
    if OPS in sys.modules:
        ext = sys.modules.get(TARGET)
        return bool(getattr(ext, 'FALLBACK_NAME', None)) and ext.unserved_refused()
    return (any(isinstance(f, OpsGuardFinder) for f in sys.meta_path)
            and os.environ.get('INLINE_MM_MMCV_FALLBACK', '1') != '0' and fallback_active())


def config_bases_active() -> bool:
    """Whether ``inline_mm::`` bases resolve in this process (finder in place and switched
    on, or the entry already added)."""
    module = sys.modules.get(CONFIG_UTILS)
    if module is not None:
        return module.MODULE2PACKAGE.get('inline_mm') == 'inline_mm'
    return (any(isinstance(f, ConfigScopeFinder) for f in sys.meta_path)
            and os.environ.get('INLINE_MM_CONFIG_BASES', '1') != '0')


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
    import argparse
    parser = argparse.ArgumentParser(
        prog='python -m _inline_mm_mmcv_hook',
        description="inline_mm's interpreter-start hook: the mmcv._ext fallback and "
                    'inline_mm:: config bases, through one .pth file in site-packages.')
    parser.add_argument('command', nargs='?', default='status',
                        choices=('install', 'uninstall', 'status'),
                        help='write the .pth, remove it, or say what is in use (default)')
    cmd = parser.parse_args(argv).command
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
    else:
        bases = 'off' if os.environ.get('INLINE_MM_CONFIG_BASES', '1') == '0' else 'on'
        print(f'{path}: {"present" if os.path.exists(path) else "absent"}; '
              f'mmcv._ext: {backend()}; inline_mm:: config bases: {bases}')
    return 0

if __name__ == '__main__':
    sys.exit(main())
