"""Run the stock mmdet or mmseg tool script for a config, chosen by its scope.

mmdet and mmsegmentation ship their ``tools/`` inside the wheel (``<pkg>/.mim/tools``,
which is also what ``mim train`` runs).  We run those scripts unchanged, so every
flag they document works, with ``inline_mm`` imported first (its backbones are
registered, its checkpoint compatibility is in place) and its mmengine behaviours
switched on (:func:`inline_mm.engine.install`), whatever the config imports.
"""
import os.path as osp
import runpy
import sys

FRAMEWORKS = {'mmdet': 'mmdet', 'mmseg': 'mmseg'}


def config_scope(config_path: str) -> str:
    from mmengine.config import Config
    if not osp.isfile(config_path):
        sys.exit(f'error: config file not found: {config_path}')
    scope = Config.fromfile(config_path).get('default_scope')
    if scope not in FRAMEWORKS:
        sys.exit(f"error: {config_path} has default_scope={scope!r}; expected 'mmdet' or "
                 "'mmseg' (inherit a base from mmdet:: or mmseg::)")
    return scope


def stock_script(scope: str, tool: str) -> str:
    pkg = __import__(FRAMEWORKS[scope])
    path = osp.join(osp.dirname(pkg.__file__), '.mim', 'tools', f'{tool}.py')
    if not osp.isfile(path):
        sys.exit(f'error: {path} is missing: reinstall {scope} (pip install -e . sets it up)')
    return path


def run(tool: str):
    if len(sys.argv) < 2 or sys.argv[1].startswith('-'):
        sys.exit(f'usage: python tools/{tool}.py CONFIG [args of the stock mmdet/mmseg '
                 f'{tool}.py ...]')
    import inline_mm.engine
    inline_mm.engine.install()
    script = stock_script(config_scope(sys.argv[1]), tool)
    sys.argv = [script] + sys.argv[1:]
    runpy.run_path(script, run_name='__main__')
