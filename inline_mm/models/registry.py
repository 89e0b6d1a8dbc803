"""Registering the InLine backbones in the OpenMMLab model registries that are installed.

Only the top-level backbones are registered; blocks stay plain ``nn.Module``s. Each
framework is optional: with only mmdet (or only mmseg) installed the other is skipped
without an error. Importing a framework's ``registry`` module pulls in no compiled mmcv
ops and no model zoo, so registering stays cheap.
"""
import importlib
from typing import List

__all__ = ['FRAMEWORKS', 'framework_registry', 'register_backbone', 'register_lazy']

#: OpenMMLab frameworks whose ``MODELS`` get the backbones
FRAMEWORKS = ('mmdet', 'mmseg')


def framework_registry(framework: str, name: str = 'MODELS'):
    """``<framework>.registry.<name>``, or None when the framework is not installed.

    A framework that is installed but fails to import still raises: only its absence
    is tolerated.
    """
    try:
        module = importlib.import_module(f'{framework}.registry')
    except ModuleNotFoundError as e:
        missing = (e.name or '').split('.')[0]
        if missing == framework:
            return None
        if missing in ('mmcv', 'mmengine'):
            raise ImportError(
                f'{framework} is installed but {missing} is not importable ({e}). '
                + (MMCV_HINT if missing == 'mmcv' else
                   'Install mmengine 0.10.x (`pip install "mmengine>=0.10.4,<0.11"`); '
                   '`make setup` installs the whole stack.')) from e
        raise
    return getattr(module, name)


#: What to do when mmdet/mmseg are installed without any mmcv.
MMCV_HINT = ('Install one of: mmcv-lite 2.1.0 (pure Python, nothing to compile; inline_mm backs '
             'the NMS/RoIAlign ops the shipped configs use with torchvision): '
             '`pip install mmcv-lite==2.1.0 && python -m _inline_mm_mmcv_hook install`; or a '
             'compiled mmcv 2.1.x: `INLINE_MM_MMCV=full make setup`. `make setup` does the '
             'former.')


def register_backbone(cls: type) -> List[str]:
    """Register ``cls`` under its name in each installed framework's ``MODELS``; returns
    those frameworks."""
    done = [f for f in FRAMEWORKS if framework_registry(f) is not None]
    for framework in done:
        framework_registry(framework).register_module(module=cls)
    return done


def register_lazy(framework: str, name: str, module: str) -> bool:
    """Register ``name`` in ``framework``'s ``MODELS`` as a builder that imports
    ``module`` (and the model zoo it needs) only when a config builds it.

    Returns:
        bool: False when the framework is not installed (or already has ``name``).
    """
    registry = framework_registry(framework)
    if registry is None or name in registry.module_dict:
        return False

    def build(*args, **kwargs):
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    build.__name__ = build.__qualname__ = name
    build.__doc__ = f'Builds :class:`{module}.{name}` (imported on first use).'
    registry.register_module(name=name, module=build)
    return True
