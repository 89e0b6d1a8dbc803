"""Build steps that setup.cfg cannot express (the metadata lives in setup.cfg).

1. ``inline_mm/.mim/{configs,tools,model-index.yml}``: mim's layout, which mmdet and mmseg ship
   too.  ``mim train inline_mm CONFIG`` runs ``<inline_mm>/.mim/tools/train.py`` and looks
   configs up under ``.mim/configs``; mmengine resolves an ``inline_mm::path`` base to
   ``.mim/configs/path`` (after trying ``.mim/model-index.yml``, which must therefore exist).
   Only a wheel gets them.  mim and mmengine find a package's folder as ``<location of its
   metadata>/inline_mm``, which for an editable install is site-packages, not the checkout,
   so ``.mim`` links in the checkout would never be read; there the tools and configs are
   used by path (``python tools/train.py configs/...``).
2. ``inline_mm_mmcv_ext.pth`` at the root of the wheel, as setuptools ships its own
   ``distutils-precedence.pth``: pip puts it into site-packages, so the import hook of
   ``_inline_mm_mmcv_hook.py`` is active after a plain ``pip install`` (editable installs do not
   carry it; ``tools/dev/setup_env.sh`` writes it with ``python -m _inline_mm_mmcv_hook install``).
"""
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))
MIM_DIRS = ('configs', 'tools')
#: mmengine reads the model index before it falls back to the plain path; an empty index says
#: "no model-zoo entries", so every ``inline_mm::`` name resolves as a path under .mim/configs.
EMPTY_MODEL_INDEX = 'Import: []\n'
SKIP = shutil.ignore_patterns('__pycache__', '*.pyc', 'dev')


def _hook_module():
    """``_inline_mm_mmcv_hook`` read from the source tree (it imports only the standard library)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        '_inline_mm_mmcv_hook_for_build', os.path.join(ROOT, '_inline_mm_mmcv_hook.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write_model_index(mim):
    source = os.path.join(ROOT, 'model-index.yml')
    target = os.path.join(mim, 'model-index.yml')
    if os.path.isfile(source):
        shutil.copyfile(source, target)
    else:
        with open(target, 'w') as f:
            f.write(EMPTY_MODEL_INDEX)


def copy_mim(package_dir):
    """Wheel: copies of the configs and the user tools (the developer scripts stay out)."""
    mim = os.path.join(package_dir, '.mim')
    if os.path.isdir(mim):
        shutil.rmtree(mim)
    os.makedirs(mim)
    for name in MIM_DIRS:
        shutil.copytree(os.path.join(ROOT, name), os.path.join(mim, name), ignore=SKIP)
    _write_model_index(mim)


class BuildPy(build_py):
    def run(self):
        super().run()
        if getattr(self, 'editable_mode', False):
            return          # see the module docstring: an editable install uses the checkout
        copy_mim(os.path.join(self.build_lib, 'inline_mm'))
        hook = _hook_module()
        target = os.path.join(self.build_lib, hook.PTH_NAME)
        with open(target, 'w') as f:
            f.write(hook.PTH_LINE)

    def get_outputs(self, include_bytecode=True):
        outputs = super().get_outputs(include_bytecode)
        if getattr(self, 'editable_mode', False):
            return outputs
        return outputs + [os.path.join(self.build_lib, _hook_module().PTH_NAME)]


setup(cmdclass={'build_py': BuildPy})
