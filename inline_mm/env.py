"""Print what a bug report needs: ``python -m inline_mm.env``."""
import argparse
import importlib
import os
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


#: CPU flags (as /proc/cpuinfo spells them) that mean bf16 arithmetic in hardware: x86's
#: AVX512-BF16 and AMX-BF16, Arm's BF16 extension (``bf16`` in its ``Features`` line)
BF16_CPU_FLAGS = ('avx512_bf16', 'amx_bf16', 'bf16')


def _cpu_flags() -> set:
    try:
        with open('/proc/cpuinfo') as f:
            lines = [ln for ln in f if ln.lower().startswith(('flags', 'features'))]
    except OSError:
        return set()
    return set(lines[0].split(':', 1)[1].split()) if lines else set()


def bf16_support(device='cpu') -> tuple:
    """``(has_units, why)``: whether ``device`` computes bf16 in hardware. On a CPU without
    bf16 units PyTorch emulates bf16 through fp32 (correct, and slower than fp32), so no tool
    of the project picks bf16 there by itself; the benchmark and the app ask here."""
    import torch
    kind = torch.device(device).type
    if kind == 'cuda':
        if not torch.cuda.is_available():
            return False, 'no CUDA device'
        ok = torch.cuda.is_bf16_supported()
        name = torch.cuda.get_device_name()
        return ok, f"{name} {'computes' if ok else 'does not compute'} bf16"
    if kind != 'cpu':
        return False, f'no bf16 check for {kind!r} devices'
    flags = _cpu_flags()
    found = [f for f in BF16_CPU_FLAGS if f in flags]
    if found:
        return True, 'CPU flags ' + ', '.join(found)
    if not flags:  # no /proc/cpuinfo (not Linux): ask PyTorch's own CPU probe
        probe = getattr(torch.cpu, '_is_avx512_bf16_supported', None)
        if probe is not None and probe():
            return True, "PyTorch's CPU probe: AVX512-BF16"
        return False, 'no bf16 units found (CPU flags not readable here)'
    return False, ('no bf16 units (none of ' + ', '.join(BF16_CPU_FLAGS) +
                   ' in the CPU flags): bf16 is emulated, slower than fp32')


def describe_impl() -> str:
    """How InLine attention runs in models built here (``impl``,
    :mod:`inline_mm.models.impl`)."""
    from inline_mm.models.impl import IMPL_ENV, check_impl, choose_path
    try:
        impl = check_impl()
    except ValueError as e:
        return f'{e}'
    where = f'${IMPL_ENV}' if os.environ.get(IMPL_ENV) else f'default; ${IMPL_ENV} unset'
    paths = {d: choose_path(impl, d) for d in ('cpu', 'cuda')}
    what = ', '.join(f"{'the per-sample kernel' if p == 'kernel' else 'the plain form'} on {d}"
                     for d, p in paths.items())
    return (f"impl={impl!r} ({where}): {what}; the plain (GPU) path without a GPU: "
            'pytest -m fake_cuda')


def describe_patches() -> list:
    """Each row of :func:`inline_mm.patches.table` as ``(name, state, applies to, check)``:
    ``state`` is 'on' or 'off' in this process, 'needed, off' where the feature check says the
    installed stack needs a row that nothing has switched on here, or 'switched off' where the
    environment keeps it off."""
    from inline_mm.patches import switched_off, table
    rows = []
    for patch in table():
        try:
            on = patch.active()
            need, why = patch.needed()
        except Exception as e:  # report, never fail: this runs on broken set-ups
            rows.append((patch.name, 'unknown', patch.versions, f'{type(e).__name__}: {e}'))
            continue
        if on:
            state = 'on'
        elif need and switched_off(patch):
            state, why = 'switched off', f'{patch.switch_off}; {why}'
        else:
            state = 'needed, off' if need else 'off'
        rows.append((patch.name, state, patch.versions, why))
    return rows


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
        refused = ', '.join(c for names, _ in ext.UNSERVED_MODULES.values() for c in names)
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
        has, why = bf16_support('cpu')
        info['CPU bf16'] = f"{'yes' if has else 'no'} ({why})"
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
        info['InLine attention'] = describe_impl()
    except Exception as e:  # report, never fail: this runs on broken set-ups
        info['InLine attention'] = f'not importable ({type(e).__name__}: {e})'

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


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog='python -m inline_mm.env',
        description='Print what a bug report needs: versions, the mmcv ops in use, the '
                    "registered backbones and inline_mm's patches of other packages.")
    parser.parse_args(argv)
    for k, v in collect_env().items():
        print(f'{k:>16}: {v}')
    from inline_mm.patches import BY_ENGINE
    print("inline_mm's patches of other packages (inline_mm/patches/); 'needed, off': "
          f'switched on by {BY_ENGINE}')
    print(f'  {"patch":<26} {"state":<13} {"applies to":<26} feature check here')
    for name, state, versions, why in describe_patches():
        print(f'  {name:<26} {state:<13} {versions:<26} {why}')


if __name__ == '__main__':
    main()
