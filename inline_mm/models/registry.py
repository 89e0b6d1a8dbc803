"""Registering the InLine backbones in the OpenMMLab model registries that are installed.

Only the top-level backbones are registered; blocks stay plain ``nn.Module``s. Each
framework is optional: with only mmdet (or only mmseg) installed the other is skipped
without an error. Importing a framework's ``registry`` module pulls in no compiled mmcv
ops and no model zoo, so registering stays cheap.
"""
import importlib
from typing import Iterable, List, Optional

__all__ = ['FRAMEWORKS', 'framework_registry', 'register_backbones']

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
        if e.name is not None and e.name.split('.')[0] == framework:
            return None
        raise
    return getattr(module, name)


def register_backbones(classes: Iterable[type],
                       frameworks: Iterable[str] = FRAMEWORKS) -> List[str]:
    """Register every class under its name in each installed framework's ``MODELS``.

    Returns:
        list[str]: The frameworks registered into.
    """
    classes = list(classes)
    done = []
    for framework in frameworks:
        registry: Optional[object] = framework_registry(framework)
        if registry is None:
            continue
        for cls in classes:
            registry.register_module(module=cls)
        done.append(framework)
    return done
