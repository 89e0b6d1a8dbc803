"""Print what a bug report needs: ``python -m inline_mm.env``."""
import importlib
import platform
import sys


def _dist_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(name)
    except PackageNotFoundError:
        return 'unknown'


#: the OpenMMLab stacks the project tests, by the distributions that provide mmengine, mmdet
#: and mmseg (reporting only: every patch is decided by a feature check, never by these names)
STACKS = {
    'upstream': ('mmengine', 'mmdet', 'mmsegmentation'),
    'onedl': ('onedl-mmengine', 'onedl-mmdetection', 'onedl-mmsegmentation'),
}


def stack_name() -> str:
    """'upstream', 'onedl', or what a mixture / neither holds (from the installed metadata)."""
    found = {}
    for stack, dists in STACKS.items():
        for dist in dists:
            if _dist_version(dist) != 'unknown':
                found[dist] = stack
    stacks = set(found.values())
    if len(stacks) == 1 and len(found) == 3:
        return stacks.pop()
    if not found:
        return 'none (no mmengine / mmdet / mmsegmentation distribution of either stack)'
    return 'mixed: ' + ', '.join(f'{d} {_dist_version(d)}' for d in found)


def describe_patches() -> dict:
    """Each of inline_mm's replacements of mmengine/mmcv behaviour: whether the installed
    stack needs it (its feature check) and whether it is active in this process."""
    out = {}
    try:
        import _inline_mm_mmcv_hook as hook
    except ImportError:
        hook = None
    try:
        import mmengine.config.utils  # noqa: F401  (the hook re-points scopes on this import)
        if hook is None:
            out['mmseg:: bases'] = 'off (the import hook is not installed)'
        elif hook.REPOINTED_SCOPES:
            out['mmseg:: bases'] = 'on: ' + ', '.join(
                f'{k} -> import name (distribution {v!r} not installed)'
                for k, v in hook.REPOINTED_SCOPES.items())
        else:
            out['mmseg:: bases'] = "off: mmengine's own look-up finds every installed scope"
    except Exception as e:
        out['mmseg:: bases'] = f'unknown ({type(e).__name__}: {e})'
    backend = hook.backend() if hook is not None else 'compiled'
    out['mmcv._ext fallback'] = ('on: no compiled mmcv._ext' if backend == 'fallback'
                                 else f'off: mmcv._ext is {backend}')
    try:
        import torch
        from inline_mm import compat
        if hasattr(torch.serialization, 'add_safe_globals'):
            out['checkpoint allowlist'] = (
                f'on: {len(compat.allow_mmengine_checkpoints())} mmengine/numpy types on '
                "torch's weights_only allowlist")
        else:
            out['checkpoint allowlist'] = 'off: this torch has no weights_only allowlist'
    except Exception as e:
        out['checkpoint allowlist'] = f'unknown ({type(e).__name__}: {e})'
    try:
        from inline_mm import engine
        for name in engine.BEHAVIOURS:
            need, why = engine.needed(name)
            out[name] = (f'needed ({why}); inline_mm.engine.install() switches it on' if need
                         else f'not needed ({why}); left to mmengine')
    except Exception as e:
        out['engine'] = f'unknown ({type(e).__name__}: {e})'
    return out


def describe_mmcv_ops() -> str:
    """Which implementation answers mmcv's compiled entry points in this environment."""
    try:
        import mmcv.ops  # noqa: F401  (imports mmcv._ext, compiled or the fallback)
        from mmcv.ops import get_compiler_version, get_compiling_cuda_version
    except Exception as e:
        return f'NOT available ({type(e).__name__}: {e})'
    try:
        import _inline_mm_mmcv_hook
        backend = _inline_mm_mmcv_hook.backend()
    except ImportError:
        backend = 'compiled'
    if backend == 'fallback':
        import torchvision
        ext = sys.modules['mmcv._ext']
        served = ', '.join(n for n in ext.SERVED if not n.startswith('get_'))
        refused = ', '.join(c for names in ext.UNSERVED_MODULES.values() for c in names)
        return (f'inline_mm stand-in (mmcv without compiled ops; torchvision '
                f'{torchvision.__version__} and PyTorch) answers {served}; every other '
                f'compiled op raises when called, and {refused} refuse to be built '
                '(compiled mmcv: docs/get_started.md)')
    return (f'compiled mmcv (compiler {get_compiler_version()}, '
            f'CUDA {get_compiling_cuda_version()})')


def collect_env() -> dict:
    info = {'Python': sys.version.replace('\n', ' '), 'Platform': platform.platform(),
            'OpenMMLab stack': stack_name()}
    try:
        import torch
        info['torch'] = torch.__version__
        info['torch CUDA'] = torch.version.cuda or 'none (CPU build)'
        info['CUDA available'] = torch.cuda.is_available()
        if torch.cuda.is_available():
            info['GPUs'] = ', '.join(torch.cuda.get_device_name(i)
                                     for i in range(torch.cuda.device_count()))
        info['torch threads'] = torch.get_num_threads()
    except ImportError as e:
        info['torch'] = f'not importable ({e})'
    for name in ('torchvision', 'numpy', 'setuptools', 'mmengine', 'mmcv', 'mmdet', 'mmseg',
                 'timm', 'pycocotools', 'safetensors'):
        try:
            mod = importlib.import_module(name)
            info[name] = getattr(mod, '__version__', None) or _dist_version(name)
        except Exception as e:  # report, never fail: this runs on broken set-ups
            info[name] = f'not importable ({type(e).__name__}: {e})'
    info['mmcv ops'] = describe_mmcv_ops()
    try:
        import inline_mm
        from inline_mm.models import FAMILIES
        from inline_mm.models.registry import FRAMEWORKS, framework_registry
        installed = {fw: framework_registry(fw) for fw in FRAMEWORKS}
        installed = {fw: r for fw, r in installed.items() if r is not None}
        names = [n for n in FAMILIES if installed and all(n in r.module_dict
                                                          for r in installed.values())]
        missing = [fw for fw in FRAMEWORKS if fw not in installed]
        where = ', '.join(installed) + (f'; {", ".join(missing)} not installed' if missing else '')
        info['inline_mm'] = (f'{inline_mm.__version__} (registered: {", ".join(names) or "none"} '
                             f'in {where or "no framework"})')
    except Exception as e:
        info['inline_mm'] = f'not importable ({type(e).__name__}: {e})'
    return info


def main():
    for k, v in collect_env().items():
        print(f'{k:>16}: {v}')
    print('inline_mm patches (each decided by a feature check of the installed stack):')
    for k, v in describe_patches().items():
        print(f'  {k:>26}: {v}')


if __name__ == '__main__':
    main()
