"""``compile=True`` in a config: the optimiser step compiles as torch expects it.

mmengine 0.10.x builds the optimiser of a ``paramwise_cfg`` (every shipped config has
one: no weight decay on norms and position tables) by writing its parameter groups into
the optimiser's ``ConfigDict``, which turns each group into a ``ConfigDict``. Eager
PyTorch does not care, but ``torch.compile`` of the Runner's ``train_step`` (what
``compile=True`` asks for) traces the optimiser's ``step`` too, and Dynamo (torch 2.4 up
to at least 2.14) handles a parameter group only as a plain ``dict``: it stops with
``'UserDefinedDictVariable' object has no attribute 'items'`` after the whole forward and
backward have compiled. Each group is made a plain ``dict`` again (same keys, same values,
the same parameter tensors) right before the Runner compiles, and only where a group is
something else: a run that resumed (torch rebuilds the groups as dicts) or a stack whose
constructor writes dicts is left as it is.
"""
import functools

from .patch import BY_ENGINE, Patch, before_fixed_mmengine, mmengine_version

__all__ = ['PATCHES', 'install', 'installed', 'plain_param_groups']


def plain_param_groups(optim_wrapper) -> int:
    """Make every parameter group of the optimiser(s) of ``optim_wrapper`` (an
    ``OptimWrapper`` or ``OptimWrapperDict``) a plain ``dict``; returns how many were
    not. The optimiser's state is keyed by the parameters, which stay the same."""
    wrappers = optim_wrapper.values() if hasattr(optim_wrapper, 'values') else [optim_wrapper]
    changed = 0
    for wrapper in wrappers:
        groups = getattr(getattr(wrapper, 'optimizer', None), 'param_groups', None) or []
        for i, group in enumerate(groups):
            if type(group) is not dict:
                groups[i] = {k: v for k, v in group.items()}
                changed += 1
    return changed


def _plain_before_compile(maybe_compile):
    @functools.wraps(maybe_compile)
    def wrapper(self, target):
        if self.cfg.get('compile', None) and getattr(self, 'optim_wrapper', None) is not None \
                and not isinstance(self.optim_wrapper, dict):
            plain_param_groups(self.optim_wrapper)
        return maybe_compile(self, target)

    wrapper._inline_mm_plain_groups = True
    return wrapper


def install():
    """Wrap ``Runner._maybe_compile`` (idempotent; a Runner without it is left alone)."""
    from mmengine.runner import Runner
    current = getattr(Runner, '_maybe_compile', None)
    if current is not None and not getattr(current, '_inline_mm_plain_groups', False):
        Runner._maybe_compile = _plain_before_compile(current)


def installed() -> bool:
    from mmengine.runner import Runner
    current = getattr(Runner, '_maybe_compile', None)
    return current is None or getattr(current, '_inline_mm_plain_groups', False)


def _compile_needed():
    from mmengine.runner import Runner
    if getattr(Runner, '_maybe_compile', None) is None:
        return False, f'mmengine {mmengine_version()}: its Runner has no compile option'
    return before_fixed_mmengine('ConfigDict parameter groups stop Dynamo at the optimiser '
                                 'step')()


#: the row of the patch table this module switches on (python -m inline_mm.env)
PATCHES = (
    Patch('compile_param_groups', "Runner._maybe_compile: a paramwise_cfg's parameter groups "
          'made plain dicts first', "compile=True stops at the optimiser step ('"
          "UserDefinedDictVariable' object has no attribute 'items')", 'mmengine < 0.11',
          BY_ENGINE, _compile_needed, installed, install),
)
