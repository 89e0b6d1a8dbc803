"""Run the stock mmdet or mmseg tool script for a config, chosen by its scope.

mmdet and mmsegmentation ship their ``tools/`` inside the wheel (``<pkg>/.mim/tools``,
which is also what ``mim train`` runs).  We run those scripts unchanged, so every
flag they document works, with ``inline_mm`` imported first (its backbones are
registered, its checkpoint compatibility is in place) and its mmengine behaviours
switched on (:func:`inline_mm.engine.install`), whatever the config imports.

Before the stock script starts, every ``type`` of the config (with ``--cfg-options``
applied) is looked up in its scope's registries: a misspelt one stops the run at once
with the name it probably meant (:mod:`inline_mm.apis.config`).
"""
import argparse
import os.path as osp
import runpy
import sys

FRAMEWORKS = {'mmdet': 'mmdet', 'mmseg': 'mmseg'}


def load_config(argv):
    """The config of a stock-script command line (``CONFIG ... [--cfg-options ...]``),
    with its ``custom_imports`` imported and ``--cfg-options`` merged, as the script will."""
    from mmengine.config import DictAction

    from inline_mm.apis import read_config
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument('config')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction)
    args, _ = parser.parse_known_args(argv)
    if not osp.isfile(args.config):
        sys.exit(f'error: config file not found: {args.config}')
    return read_config(args.config, args.cfg_options)


def config_scope(cfg, config_path: str) -> str:
    scope = cfg.get('default_scope')
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


def run(tool: str, argv=None):
    """``tool`` ('train' or 'test') of the config's framework on ``argv`` (default: the
    command line), with inline_mm in place."""
    argv = sys.argv[1:] if argv is None else list(argv)
    usage = f'usage: python tools/{tool}.py CONFIG [args of the stock mmdet/mmseg {tool}.py ...]'
    if argv[:1] in (['-h'], ['--help']):
        # `mim train` asks for the help first (and reads it for a --gpus flag: there is none)
        print(f'{usage}\n\nThe stock script is chosen by the config\'s default_scope; '
              f'its own flags: python <mmdet|mmseg>/.mim/tools/{tool}.py -h')
        return
    if not argv or argv[0].startswith('-'):
        sys.exit(usage)
    import inline_mm.engine
    from inline_mm.apis.config import check_types
    inline_mm.engine.install()
    cfg = load_config(argv)
    scope = config_scope(cfg, argv[0])
    check_types(cfg, scope, argv[0])
    script = stock_script(scope, tool)
    sys.argv = [script] + argv
    runpy.run_path(script, run_name='__main__')
    close_process_group()


def close_process_group():
    """Free the finished run and destroy the default process group of a ``torchrun`` process,
    as torch asks of every trainer at the end of its main, while the interpreter is fully alive.

    The stock scripts leave both to interpreter exit: the Runner, and with it the DDP or FSDP
    wrapper that holds the group, lives on in reference cycles after the script returns, and
    is freed by the collector during finalisation, with the group's worker threads still
    running; a process can then die with "terminate called without an active exception" (SIGABRT)
    after a run that went well (pytorch/pytorch#190489). Called only after the script
    returned: a rank that failed must not wait here on ranks still communicating."""
    import gc

    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        gc.collect()
        dist.destroy_process_group()


if __name__ == '__main__':
    # python -m inline_mm.cli.launch {train,test} CONFIG ...: the same as tools/{train,test}.py
    if len(sys.argv) < 2 or sys.argv[1] not in ('train', 'test'):
        sys.exit('usage: python -m inline_mm.cli.launch {train,test} CONFIG [args ...]')
    run(sys.argv[1], sys.argv[2:])
