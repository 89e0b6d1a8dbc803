"""FSDP units for InLine models: the auto-wrap policy mmengine's ``FSDPStrategy`` finds by name.

Fully sharded data parallel (``torch.distributed.fsdp``) gathers a unit's parameters just
before the unit runs and frees them after, so a GPU holds the whole of only one unit at a
time (plus its shard of everything). Which modules become units decides how much that saves
and how much it communicates. :func:`inline_auto_wrap_policy` makes these units:

* every block of an InLine backbone (the modules its ``block_key`` names: a Swin, PVT,
  CSwin or DeiT block, attention and MLP together), the natural unit of a transformer;
* every frozen part (``frozen_stages``: the stem, whole stages) as one unit of its own, so
  that no unit mixes parameters that train with parameters that do not (FSDP flattens a
  unit's parameters into one tensor; a frozen one in a trained unit would carry gradient
  storage for nothing);
* any other module (a neck, a decode head, an RoI head) whose parameters not yet in a unit
  number at least ``min_num_params``;
* what is left (patch merging, output norms, small heads) in the root unit.

A config selects it by name (it is registered in mmengine's ``FUNCTIONS``)::

    runner_type = 'FlexibleRunner'
    strategy = dict(type='FSDPStrategy', state_dict_cfg='full',
                    model_wrapper=dict(auto_wrap_policy=dict(type='inline_auto_wrap_policy'),
                                       use_orig_params=True))

Importing this module registers the function; it changes nothing else.
"""
import re
import weakref

import torch.nn as nn

__all__ = ['inline_auto_wrap_policy', 'fsdp_units', 'DEFAULT_MIN_NUM_PARAMS']

#: the size from which a module outside the blocks becomes a unit of its own
DEFAULT_MIN_NUM_PARAMS = 10_000_000

# module -> 'unit' (wrap it whole) or 'inside' (part of a unit: never wrapped alone). Kept
# with the modules (weak keys), so that a block found under its backbone is known when FSDP
# reaches it. A module's role follows from the model and never changes for it.
_ROLES = weakref.WeakKeyDictionary()


def _blocks(backbone: nn.Module):
    pattern = re.compile(type(backbone).block_key)
    return [m for name, m in backbone.named_modules() if name and pattern.fullmatch(name + '.')]


def _frozen(module: nn.Module) -> bool:
    params = list(module.parameters())
    return bool(params) and not any(p.requires_grad for p in params)


def _mark_unit(module: nn.Module):
    _ROLES[module] = 'unit'
    for inner in module.modules():
        if inner is not module:
            _ROLES[inner] = 'inside'


def inline_auto_wrap_policy(module: nn.Module, recurse: bool, nonwrapped_numel: int,
                            min_num_params: int = DEFAULT_MIN_NUM_PARAMS) -> bool:
    """FSDP auto-wrap policy: a unit per InLine block, frozen parts as units of their own,
    other modules by size (see the module docstring).

    FSDP calls it top-down on the model being wrapped, with ``recurse=True`` to ask whether
    to look inside a module and with ``recurse=False`` whether to wrap what is left of it.

    Args:
        module (nn.Module): The module FSDP asks about.
        recurse (bool): Whether FSDP asks about descending into ``module``.
        nonwrapped_numel (int): Parameters of ``module`` not yet in a unit.
        min_num_params (int): Size from which a module outside the blocks is a unit.
            Default: :data:`DEFAULT_MIN_NUM_PARAMS` (10M).

    Returns:
        bool: Descend into ``module`` (``recurse=True``), or wrap it (``recurse=False``).
    """
    from inline_mm.models.base import InLineBackbone
    role = _ROLES.get(module)
    if recurse:
        if role == 'inside':
            return False
        if role is None:
            if _frozen(module):
                _mark_unit(module)
            elif isinstance(module, InLineBackbone):
                for block in _blocks(module):
                    if _ROLES.get(block) is None:
                        _mark_unit(block)
        return True
    if role is not None:
        return role == 'unit'
    return nonwrapped_numel >= min_num_params


def fsdp_units(model: nn.Module, policy=inline_auto_wrap_policy, **kwargs) -> dict:
    """The modules ``policy`` makes FSDP units of, as FSDP's recursive wrapping asks it
    (children first, then what is left of the parent; the root is FSDP's own unit), without
    wrapping anything: ``{qualified name: parameters in the unit}``, ``''`` being the root.
    For reading a policy's choice on a model before a run (no process group needed)."""
    units = {}

    def visit(name: str, module: nn.Module, root: bool) -> int:
        numel = sum(p.numel() for p in module.parameters())
        if not policy(module=module, recurse=True, nonwrapped_numel=numel, **kwargs):
            return 0
        wrapped = sum(visit(f'{name}.{child_name}' if name else child_name, child, False)
                      for child_name, child in module.named_children())
        if not root and policy(module=module, recurse=False, nonwrapped_numel=numel - wrapped,
                               **kwargs):
            units[name] = numel - wrapped
            return numel
        return wrapped

    wrapped = visit('', model, True)
    units[''] = sum(p.numel() for p in model.parameters()) - wrapped
    return units


def _register():
    try:
        from mmengine.registry import FUNCTIONS
    except ModuleNotFoundError:     # a timm-only install: nothing to register into
        return
    if 'inline_auto_wrap_policy' not in FUNCTIONS.module_dict:
        FUNCTIONS.register_module(name='inline_auto_wrap_policy', module=inline_auto_wrap_policy)


_register()
