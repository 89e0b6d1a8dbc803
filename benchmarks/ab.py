"""One family from two copies of ``inline_mm/models``, timed in one process.

``python -m benchmarks.ab --old PATH`` builds the family (default InLine-PVT-T) from
the checkout it runs in and from ``PATH`` (another copy of the ``inline_mm/models``
folder, e.g. ``git archive <commit> inline_mm/models | tar -x -C /tmp``), gives both
the same weights, checks that they compute the same outputs, and times them in
interleaved rounds (A B, B A, ...), so that a change of load hits both alike; it prints
the medians and the median of the per-round ratios. ``--modes``: ``inference`` (eval,
``no_grad`` forward) and ``training`` (train mode, forward and backward of a fixed
random linear function of every output; the gradients are checked equal too).
``--new-args KEY=VALUE`` passes constructor arguments to the new model only (e.g.
``batched=true`` times the batched path against the old default). Conditions are
those of :mod:`.padding`: ``none`` (every image fills the canvas) and ``padded``.
``--clock cpu`` (the default) times the process's CPU time, which other jobs on a
shared machine disturb far less than the wall clock (``--clock wall``). ``--dtype bf16``
runs both under ``torch.autocast('cpu', torch.bfloat16)`` and checks old against new at
the bf16 bound (outputs: 3e-2 relative to the largest value, instead of fp32's 1e-4;
gradients: 5e-2 relative to their norm, the rounding noise of bf16 sums over every token).

``PATH`` is imported as a package without running its ``__init__``, and its registry
registers nothing (the same names would reach mmdet and mmseg a second time); the
model packages import nothing from the rest of ``inline_mm``.
"""
import argparse
import importlib
import statistics
import sys
import time
import types
from pathlib import Path
from typing import Optional

import torch

from inline_mm.models import FAMILIES
from .padding import CONDITIONS, make_batch

_OLD = '_ab_old_models'


def import_models(path: Path) -> str:
    """Make ``path`` importable as the package :data:`_OLD`; returns its name."""
    pkg = types.ModuleType(_OLD)
    pkg.__path__ = [str(path)]
    sys.modules[_OLD] = pkg
    return _OLD


def _value(text: str):
    return {'true': True, 'false': False, 'none': None}.get(text.lower(), text)


def build_pair(family: str, arch: str, old: Path, new_args: Optional[dict] = None):
    """``(old, new)`` models in eval mode with the new one's weights copied from the old."""
    cls = FAMILIES[family].cls
    package = import_models(old)
    # The old copy registers nothing: its classes have the new ones' names, which mmdet's
    # and mmseg's registries refuse a second time (the copy is only built from here).
    importlib.import_module(f'{package}.registry').FRAMEWORKS = ()
    module = importlib.import_module(f'{package}.{cls.__module__.rsplit(".", 1)[1]}')
    torch.manual_seed(0)
    a = getattr(module, family)(arch=arch, drop_path_rate=0.).eval()
    b = cls(arch=arch, drop_path_rate=0., **(new_args or {})).eval()
    b.load_state_dict(a.state_dict())
    return a, b


CLOCKS = {'cpu': time.process_time, 'wall': time.perf_counter}
MODES = ('inference', 'training')


#: ``--dtype`` -> (the autocast dtype or None, the bound of old against new on outputs
#: (relative to the largest value) and on gradients (fp32: the same; bf16: relative to the
#: norm, as each sums bf16 terms over every token and sits 1-4% from fp32 either way))
DTYPES = {'fp32': (None, 1e-4, None), 'bf16': (torch.bfloat16, 3e-2, 5e-2)}


def step(model, x, mode: str, weights=None, dtype=None):
    """One inference forward, or one training step (forward + backward of ``weights``
    dotted with the outputs), under CPU autocast to ``dtype`` (None: off); returns the
    outputs (and the gradients when training)."""
    with torch.autocast('cpu', dtype or torch.bfloat16, enabled=dtype is not None):
        if mode == 'inference':
            with torch.no_grad():
                return model(x), None
        model.zero_grad(set_to_none=True)
        outs = model(x)
    sum((o.float() * w).sum() for o, w in zip(outs, weights)).backward()
    return outs, [p.grad for p in model.parameters() if p.grad is not None]


def time_once(model, x, clock, mode='inference', weights=None, dtype=None) -> float:
    t = clock()
    step(model, x, mode, weights, dtype)
    return clock() - t


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--old', type=Path, required=True, help='another copy of inline_mm/models')
    p.add_argument('--family', default='InLinePVT', choices=sorted(FAMILIES))
    p.add_argument('--arch', default='tiny')
    p.add_argument('--size', type=int, nargs=2, default=(512, 512), metavar=('H', 'W'))
    p.add_argument('--batch', type=int, default=2)
    p.add_argument('--conditions', nargs='+', choices=CONDITIONS, default=list(CONDITIONS))
    p.add_argument('--rounds', type=int, default=9)
    p.add_argument('--threads', type=int, default=1)
    p.add_argument('--clock', choices=sorted(CLOCKS), default='cpu')
    p.add_argument('--modes', nargs='+', choices=MODES, default=['inference'])
    p.add_argument('--dtype', choices=sorted(DTYPES), default='fp32',
                   help='bf16: both under CPU bf16 autocast, compared at 3e-2')
    p.add_argument('--new-args', nargs='*', default=[], metavar='KEY=VALUE',
                   help='constructor arguments of the new model only (true/false/none parsed)')
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    new_args = dict(kv.split('=', 1) for kv in args.new_args)
    new_args = {k: _value(v) for k, v in new_args.items()}
    old, new = build_pair(args.family, args.arch, args.old, new_args)
    dtype, bound, grad_bound = DTYPES[args.dtype]
    print(f'{args.family}-{args.arch}, {args.batch} x {args.size[0]}x{args.size[1]}, '
          f'{args.dtype}, {args.threads} thread(s), {args.rounds} interleaved rounds, '
          f'{args.clock} time'
          + (f', new with {new_args}' if new_args else ''))
    for mode in args.modes:
        for m in (old, new):
            m.train(mode == 'training')
        for condition in args.conditions:
            torch.manual_seed(1)
            x = make_batch(tuple(args.size), condition, args.batch)
            gen = torch.Generator().manual_seed(2)
            with torch.no_grad():
                weights = [torch.randn(o.shape, generator=gen) for o in old(x)]
            (outs_a, grads_a), (outs_b, grads_b) = (step(m, x, mode, weights, dtype)
                                                    for m in (old, new))
            pairs = [(a, b, False) for a, b in zip(outs_a, outs_b)] + [
                (a, b, True) for a, b in zip(grads_a or [], grads_b or [])]
            for a, b, is_grad in pairs:
                a, b = a.float(), b.float()
                if is_grad and grad_bound is not None:
                    err = ((a - b).norm() / a.norm().clamp_min(1e-12)).item()
                else:
                    err = ((a - b).abs().max() / a.abs().max().clamp_min(1e-12)).item()
                if err > (grad_bound if is_grad and grad_bound is not None else bound):
                    raise RuntimeError(f'{mode}, {condition}: outputs or gradients differ '
                                       f'(rel. err. {err:.2e})')
            times = {'old': [], 'new': []}
            for r in range(args.rounds):
                order = (('old', old), ('new', new)) if r % 2 == 0 else (('new', new), ('old', old))
                for name, model in order:
                    times[name].append(time_once(model, x, CLOCKS[args.clock], mode, weights,
                                                 dtype))
            ratios = [n / o for o, n in zip(times['old'], times['new'])]
            med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
            print(f'{mode:>9} {condition:>7}: old {med["old"]:8.1f} ms  new {med["new"]:8.1f} ms  '
                  f'new/old median {statistics.median(ratios):.3f} '
                  f'(rounds {min(ratios):.3f}..{max(ratios):.3f})', flush=True)


if __name__ == '__main__':
    main()
