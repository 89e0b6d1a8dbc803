"""The package's version, and the import paths that moved, each kept working until the
version that removes it (docs/changelog.md lists both).

An old path still imports, with a :class:`FutureWarning` that names its new home and
:data:`REMOVED_IN`, shown under Python's default warning filters:

* a moved module (:data:`MOVED_MODULES`) is answered by :class:`MovedPathFinder`, which
  ``import inline_mm`` puts first on :data:`sys.meta_path`: importing the old name gives the
  new module itself (the same object, so patching or ``isinstance`` sees one module), or, for a
  module split in several, a module that looks each name up in the new ones in order;
* a name moved out of a module that stays (:data:`MOVED_NAMES`) is answered by that module's
  ``__getattr__``, which calls :func:`moved_attribute`;
* ``python -m`` of an old command (:data:`MOVED_COMMANDS`) says where the command went and
  runs it there.

Nothing here imports the rest of the package (``setup.cfg`` reads :data:`__version__`).
"""
import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from typing import Dict, Optional, Tuple

__version__ = '0.2.0'

#: the release that removes every old path below
REMOVED_IN = '0.3.0'

#: old module -> its new home; a tuple of several: the module was split, and a name is looked
#: up in each in order
MOVED_MODULES: Dict[str, Tuple[str, ...]] = {
    # 0.2.0: the package grouped by job (docs/dev/layout.md)
    'inline_mm.attention_maps': ('inline_mm.visualization.attention_maps',),
    'inline_mm.attention_views': ('inline_mm.visualization.attention_views',),
    'inline_mm.compat': ('inline_mm.patches.mmengine_checkpoints',),
    'inline_mm.config_types': ('inline_mm.apis.config',),
    'inline_mm.consistency': ('inline_mm.analysis.consistency',),
    'inline_mm.detection': ('inline_mm.models.detection',),
    'inline_mm.detection.pad_aware_rpn': ('inline_mm.models.detection.pad_aware_rpn',),
    'inline_mm.detection.simple_fpn': ('inline_mm.models.detection.simple_fpn',),
    'inline_mm.engine.checkpointing': ('inline_mm.patches.checkpointing',),
    'inline_mm.engine.compiling': ('inline_mm.patches.compiling',),
    'inline_mm.engine.distributed': ('inline_mm.patches.distributed',),
    'inline_mm.engine.loading': ('inline_mm.patches.loading',),
    'inline_mm.engine.random_state': ('inline_mm.patches.random_state',),
    'inline_mm.engine.workers': ('inline_mm.patches.workers',),
    'inline_mm.export': ('inline_mm.deploy.backbone',),
    'inline_mm.memory': ('inline_mm.analysis.memory',),
    'inline_mm.mmcv_ext': ('inline_mm.patches.mmcv_ext',),
    'inline_mm.toydata': ('inline_mm.datasets.toy',),
    'inline_mm.toydata.coco': ('inline_mm.datasets.toy.coco',),
    'inline_mm.toydata.exports': ('inline_mm.datasets.toy.exports',),
    'inline_mm.toydata.segmentation': ('inline_mm.datasets.toy.segmentation',),
    'inline_mm.weights': ('inline_mm.models.weights',),
    # 0.2.0: the data checks split by job
    'inline_mm.datasets.checks': ('inline_mm.datasets.problems', 'inline_mm.datasets.image_reading',
                                  'inline_mm.datasets.folder_checks',
                                  'inline_mm.datasets.dataset_files',
                                  'inline_mm.datasets.coco_checks'),
}

#: module that stays -> {name moved out of it: its new module}
MOVED_NAMES: Dict[str, Dict[str, str]] = {
    # 0.2.0: inline_mm.analysis became a package (one module per measurement)
    'inline_mm.analysis': {name: 'inline_mm.analysis.complexity' for name in
                           ('Complexity', 'count_macs', 'count_params', 'measure')},
    # 0.2.0: the timm models' networks are in inline_mm.models; inline_mm.timm registers them
    'inline_mm.timm': {name: 'inline_mm.models' for name in
                       ('InLineClassifier', 'InLineFeatures', 'InLineIntermediates')},
}

#: old ``python -m`` command -> (the module that is the command now, its console script)
MOVED_COMMANDS: Dict[str, Tuple[str, str]] = {
    'inline_mm.weights': ('inline_mm.cli.weights', 'inline-mm-weights'),
}


def _warn(old: str, new: str, stacklevel: int):
    warnings.warn(f'{old} moved to {new} in inline_mm 0.2.0; the old path is removed in '
                  f'{REMOVED_IN}: use {new}', FutureWarning, stacklevel=stacklevel + 1)


def moved_attribute(module: str, name: str):
    """``module.name`` found in its new module (:data:`MOVED_NAMES`), with the warning; for a
    module's ``__getattr__``. Raises the usual ``AttributeError`` for any other name."""
    new = MOVED_NAMES.get(module, {}).get(name)
    if new is None:
        raise AttributeError(f'module {module!r} has no attribute {name!r}')
    # Two frames up: the module's __getattr__, then whoever reads the name (an import
    # statement's own frames are skipped by the warnings module).
    _warn(f'{module}.{name}', f'{new}.{name}', stacklevel=3)
    return getattr(importlib.import_module(new), name)


class _SplitModule(types.ModuleType):
    """An old module split in several (:data:`MOVED_MODULES`): each name read from the new
    modules in order."""

    def __getattr__(self, name: str):
        if name.startswith('__'):       # the import system's questions (__path__, ...)
            raise AttributeError(name)
        homes = MOVED_MODULES[self.__name__]
        for new in homes:
            module = importlib.import_module(new)
            if hasattr(module, name):
                return getattr(module, name)
        raise AttributeError(f'module {self.__name__!r} has no attribute {name!r} (it was split '
                             f'into {", ".join(homes)})')

    def __dir__(self):
        return sorted({n for new in MOVED_MODULES[self.__name__]
                       for n in dir(importlib.import_module(new))})


class MovedPathFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers the imports of :data:`MOVED_MODULES` (and ``python -m`` of
    :data:`MOVED_COMMANDS`); every other name is left to Python's own finders."""

    def find_spec(self, fullname: str, path=None, target=None):
        if fullname not in MOVED_MODULES:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec) -> Optional[types.ModuleType]:
        return _SplitModule(spec.name) if len(MOVED_MODULES[spec.name]) > 1 else None

    def exec_module(self, module: types.ModuleType):
        homes = MOVED_MODULES[module.__name__]
        # Frames up to the importer: this one, then importlib's (the warnings module skips
        # those when it counts).
        if isinstance(module, _SplitModule):
            warnings.warn(f'{module.__name__} was split into {", ".join(homes)} in inline_mm '
                          f'0.2.0; the old path is removed in {REMOVED_IN}: import each name '
                          'from its new module', FutureWarning, stacklevel=2)
            module.__all__ = sorted({n for new in homes
                                     for n in getattr(importlib.import_module(new), '__all__',
                                                      ())})
            return
        _warn(module.__name__, homes[0], stacklevel=2)
        # The import system hands out what sys.modules holds after this: the new module.
        sys.modules[module.__name__] = importlib.import_module(homes[0])

    def get_code(self, fullname: str) -> types.CodeType:
        """What ``python -m`` runs for an old path: the command, where it went."""
        if fullname not in MOVED_COMMANDS:
            return compile(f'import {fullname}', f'<moved: {fullname}>', 'exec')
        new, script = MOVED_COMMANDS[fullname]
        message = (f'python -m {fullname} moved to python -m {new} (or {script}) in inline_mm '
                   f'0.2.0; the old command is removed in {REMOVED_IN}')
        source = ('import runpy, warnings\n'
                  f'warnings.warn({message!r}, FutureWarning, stacklevel=1)\n'
                  f'runpy.run_module({new!r}, run_name="__main__", alter_sys=True)\n')
        return compile(source, f'<moved: {fullname}>', 'exec')


def install_finder():
    """Put :class:`MovedPathFinder` first on :data:`sys.meta_path` (once): before Python's
    own finders, which would otherwise load a second copy of a module under its old name
    through an aliased package's ``__path__``."""
    if not any(isinstance(f, MovedPathFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, MovedPathFinder())
