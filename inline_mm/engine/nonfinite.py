"""Stop at the first non-finite loss and say where it came from.

Off by default; switch it on in a config::

    custom_hooks = [dict(type='NonFiniteCheckHook')]

Each training step the hook looks at the loss terms the model returns, *before* the
backward pass and the optimizer step (a forward hook on the model).  That costs one
``isfinite`` over a handful of scalars (plus, when distributed, an all-reduce of one
number per process so that all processes stop together).  Nothing else runs while
the losses are finite.

When a loss is NaN or infinite the hook re-runs the same forward pass (same batch,
same random state, no gradients) with a forward hook on every module, finds the
first module whose output holds a NaN or inf, and raises
:class:`NonFiniteLossError` naming the iteration, the loss terms and that module
(with whether its inputs and its parameters were finite).  Because this happens
before the optimizer step, the weights are still those of the previous iteration,
and the checkpoints on disk are intact: fix the cause and ``--resume``.
"""
import functools
from typing import List, Optional, Tuple

import torch
import torch.distributed as dist
import torch.nn as nn
from mmengine.hooks import Hook
from mmengine.registry import HOOKS

__all__ = ['NonFiniteCheckHook', 'NonFiniteLossError', 'has_nonfinite', 'first_nonfinite_module']


class NonFiniteLossError(FloatingPointError):
    """A training loss was NaN or infinite (raised by :class:`NonFiniteCheckHook`)."""


def has_nonfinite(obj) -> bool:
    """True when any floating-point tensor in ``obj`` (a tensor, or nested lists,
    tuples and dicts of them; other objects are ignored) holds a NaN or inf."""
    if isinstance(obj, torch.Tensor):
        return obj.is_floating_point() and not bool(torch.isfinite(obj).all())
    if isinstance(obj, (list, tuple)):
        return any(has_nonfinite(o) for o in obj)
    if isinstance(obj, dict):
        return any(has_nonfinite(o) for o in obj.values())
    return False


def first_nonfinite_module(model: nn.Module, args: tuple, kwargs: dict
                           ) -> Tuple[Optional[str], Optional[nn.Module], dict]:
    """Run ``model(*args, **kwargs)`` without gradients and find the first module
    (in the order modules finish) whose output holds a NaN or inf.

    Args:
        model (nn.Module): The model; its submodules are watched (not the model itself).
        args (tuple): Positional arguments of the forward call.
        kwargs (dict): Keyword arguments of the forward call.

    Returns:
        tuple: ``(name, module, facts)``; ``name`` is None when no module output was
        non-finite. ``facts`` has ``inputs_finite``, ``params_finite`` (of that module)
        and ``error`` (an exception the re-run raised, if any).
    """
    found: List[tuple] = []

    def record(name, module, inputs, output):
        if not found and has_nonfinite(output):
            found.append((name, module, not has_nonfinite(inputs)))

    handles = [m.register_forward_hook(functools.partial(record, name))
               for name, m in model.named_modules() if name]
    facts = dict(error=None)
    try:
        with torch.no_grad():
            model(*args, **kwargs)
    except Exception as e:          # the re-run only diagnoses; report, do not mask
        facts['error'] = e
    finally:
        for h in handles:
            h.remove()
    if not found:
        return None, None, facts
    name, module, inputs_finite = found[0]
    facts.update(inputs_finite=inputs_finite,
                 params_finite=not has_nonfinite(list(module.parameters(recurse=False))))
    return name, module, facts


def _loss_terms(losses: dict) -> List[Tuple[str, torch.Tensor]]:
    """The terms mmengine sums into the training loss (keys containing 'loss')."""
    terms = []
    for key, value in losses.items():
        if 'loss' not in key:
            continue
        if isinstance(value, torch.Tensor):
            terms.append((key, value.detach().float().sum()))
        elif isinstance(value, (list, tuple)) and value:
            terms.append((key, sum(v.detach().float().sum() for v in value)))
    return terms


def _rng_state():
    state = {'cpu': torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state['cuda'] = torch.cuda.get_rng_state()
    return state


def _set_rng_state(state):
    torch.set_rng_state(state['cpu'])
    if 'cuda' in state:
        torch.cuda.set_rng_state(state['cuda'])


@HOOKS.register_module()
class NonFiniteCheckHook(Hook):
    """Raise at the first NaN/inf training loss, naming the iteration and the first
    module whose output was non-finite (see the module docstring).

    Works with any mmengine model (mmdet detectors, mmseg segmentors), with
    ``AmpOptimWrapper`` and under ``DistributedDataParallel``.

    Args:
        interval (int): Check every ``interval`` iterations. Default: 1.
        locate (bool): Re-run the failing forward pass to find the module where the
            first non-finite value appeared. Default: True.
    """

    priority = 'VERY_HIGH'

    def __init__(self, interval: int = 1, locate: bool = True):
        if not isinstance(interval, int) or interval < 1:
            raise ValueError(f'NonFiniteCheckHook: interval must be a positive integer, '
                             f'got {interval!r}')
        self.interval = interval
        self.locate = locate
        self._handles = []
        self._runner = None
        self._rng = None
        self._busy = False

    # ------------------------------------------------------------------ hook points
    def before_train(self, runner):
        self._runner = runner
        model = runner.model.module if hasattr(runner.model, 'module') else runner.model
        self._handles = [
            model.register_forward_pre_hook(self._before_forward, with_kwargs=True),
            model.register_forward_hook(self._after_forward, with_kwargs=True)]

    def after_train(self, runner):
        for h in self._handles:
            h.remove()
        self._handles = []

    # ------------------------------------------------------------------ checks
    def _active(self, module, kwargs) -> bool:
        return (not self._busy and module.training and kwargs.get('mode') == 'loss'
                and self._runner is not None
                and self.every_n_train_iters(self._runner, self.interval))

    def _before_forward(self, module, args, kwargs):
        if self._active(module, kwargs) and self.locate:
            self._rng = _rng_state()

    def _after_forward(self, module, args, kwargs, output):
        if not (self._active(module, kwargs) and isinstance(output, dict)):
            return
        terms = _loss_terms(output)
        if not terms:
            return
        values = torch.stack([v for _, v in terms])
        bad = (~torch.isfinite(values)).any().float().reshape(1)
        world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        if world > 1:
            # Every process must stop at the same step, or the others hang in the
            # next gradient all-reduce.
            flags = bad.new_zeros(world)
            flags[dist.get_rank()] = bad[0]
            dist.all_reduce(flags)
            ranks = [r for r, f in enumerate(flags.tolist()) if f]
        else:
            ranks = [0] if bad.item() else []
        if ranks:
            self._fail(module, args, kwargs, terms, values, ranks)

    def _fail(self, module, args, kwargs, terms, values, ranks):
        from mmengine.runner import EpochBasedTrainLoop
        runner = self._runner
        it = runner.iter + 1          # as the training log counts
        epoch = (f' (epoch {runner.epoch + 1})'
                 if isinstance(runner.train_loop, EpochBasedTrainLoop) else '')
        distributed = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        rank = dist.get_rank() if distributed else 0
        # Every process re-runs its forward, so that collective layers (SyncBN on GPUs)
        # see the same calls everywhere; only the failing ones report the result.
        found = (self._describe(module, args, kwargs)
                 if self.locate and self._rng is not None else None)
        if rank in ranks:
            where = ', '.join(f'{k}={v:.4g}' for (k, _), v in zip(terms, values.tolist()))
            lines = [f'NonFiniteCheckHook: non-finite loss at iteration {it}{epoch}: {where}.']
            if distributed:
                lines.append(f'Processes with a non-finite loss: rank(s) {ranks}.')
            inputs = kwargs.get('inputs', args[0] if args else None)
            if has_nonfinite(inputs):
                lines.append('The input batch itself holds NaN/inf values (after the data '
                             'preprocessor): check the images and the normalisation.')
            elif found is not None:
                lines.append(found)
        else:
            lines = [f'NonFiniteCheckHook: non-finite loss at iteration {it}{epoch} in '
                     f'process(es) of rank {ranks} (this one, rank {rank}, had finite losses); '
                     'their error says where it appeared. All processes stop together.']
        lines.append(
            'Training stopped before the optimizer step: the weights are those of '
            f'iteration {it - 1} and the checkpoints on disk are intact. Usual remedies: a '
            'lower learning rate or a longer warm-up, gradient clipping '
            '(optim_wrapper.clip_grad=dict(max_norm=1.0)), or with fp16 AMP bf16 instead '
            "(optim_wrapper.dtype='bfloat16'); then continue with --resume.")
        message = '\n'.join(lines)
        runner.logger.error(message)
        raise NonFiniteLossError(message)

    def _describe(self, module, args, kwargs) -> str:
        saved = _rng_state()
        _set_rng_state(self._rng)
        self._busy = True
        try:
            name, culprit, facts = first_nonfinite_module(module, args, kwargs)
        finally:
            self._busy = False
            _set_rng_state(saved)
        if name is None:
            note = ('no module output was non-finite when the step was re-run, so the '
                    'non-finite value arose in the loss computation itself')
            if facts['error'] is not None:
                note += f' (the re-run raised {type(facts["error"]).__name__}: ' \
                        f'{facts["error"]})'
            return f'Where: {note}.'
        state = ('its inputs were finite' if facts['inputs_finite']
                 else 'its inputs were already non-finite (produced outside any module)')
        params = ('its own parameters are finite' if facts['params_finite']
                  else 'its own parameters hold NaN/inf')
        return (f"Where: the first non-finite value appeared in the output of module "
                f"'{name}' ({type(culprit).__name__}); {state}, {params}.")
