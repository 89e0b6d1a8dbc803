"""InLine attention alone: the module (its ``impl`` for the device) against the formula
written out (:func:`.reference.attention`), same weights, one process
(``python -m benchmarks --attention``)."""
from typing import List

import torch

from inline_mm.models.attention import InLineAttention
from . import reference
from .backbones import MODES
from .measure import Timer, interleaved_times, time_stats

__all__ = ['run_attention', 'attention_table']


def run_attention(args, device: torch.device) -> List[dict]:
    """Time :class:`InLineAttention` (C=96, 3 heads, projections included) and
    :func:`.reference.attention` on the same weights, after checking they agree.

    Args:
        args: ``attention_hw`` (map size), ``batch``, ``modes``, ``warmup`` and
            ``attention_repeats`` (``python -m benchmarks``'s arguments).
        device (torch.device): Where to run.

    Returns:
        list[dict]: One row per (mode, path) with median/min/max ms and peak MiB.
    """
    timer = Timer(device)
    h, w = args.attention_hw
    c, heads = 96, 3
    torch.manual_seed(0)
    attn = InLineAttention(c, heads).to(device)
    x = torch.randn(args.batch, h * w, c, device=device)
    grad = torch.randn_like(x)
    paths = {'production (InLineAttention)': lambda t: attn(t, (h, w)),
             'reference (written out)': lambda t: reference.attention(attn, t, (h, w))}
    with torch.no_grad():
        outs = [fn(x) for fn in paths.values()]
    err = ((outs[0] - outs[1]).abs().max() / outs[1].abs().max()).item()
    del outs
    print(f'\nattention: C={c}, {heads} heads, {h}x{w} = {h * w} tokens, batch {args.batch}, '
          f'{device.type}; production vs reference max rel. error {err:.1e}')
    if err > 1e-4:
        raise RuntimeError('production and reference attention disagree; not timing them')

    def step_for(fn, mode):
        if mode == 'inference':
            def step():
                with torch.no_grad():
                    fn(x)
        else:
            def step():
                fn(x.detach().requires_grad_()).backward(grad)
                attn.zero_grad(set_to_none=True)
        return step

    rows = []
    for mode in args.modes:
        steps = {name: step_for(fn, mode) for name, fn in paths.items()}
        # two paths: each round starts with the other one
        times = interleaved_times(timer, steps, args.warmup, args.attention_repeats)
        for name in paths:
            rows.append(dict(device=device.type, mode=mode, path=name, tokens=h * w,
                             height=h, width=w, channels=c, heads=heads, batch=args.batch,
                             threads=torch.get_num_threads(), **time_stats(times[name]),
                             peak_mib=timer.peak_bytes(steps[name]) / 2 ** 20,
                             memory_method=timer.mem_method))
    return rows


def attention_table(rows: List[dict]) -> str:
    lines = []
    for dev in sorted({r['device'] for r in rows}):
        lines.append(f'\n{dev.upper()} attention: median ms (min-max) [peak MiB]')
        for mode in MODES:
            sel = [r for r in rows if r['device'] == dev and r['mode'] == mode]
            if not sel:
                continue
            what = 'forward' if mode == 'inference' else 'forward + backward'
            for r in sel:
                lines.append(f'  {what:18s} {r["path"]:36s} {r["median_ms"]:8.1f} '
                             f'({r["min_ms"]:.1f}-{r["max_ms"]:.1f}, n={r["runs"]}) '
                             f'[{r["peak_mib"]:.1f}]')
            prod = next(r for r in sel if r['path'].startswith('production'))
            ref = next(r for r in sel if r['path'].startswith('reference'))
            speedup = ref['median_ms'] / prod['median_ms']
            lines.append(f'  {what:18s} speed-up reference / production {speedup:.2f}x, '
                         f'peak memory production / reference '
                         f'{prod["peak_mib"] / ref["peak_mib"]:.2f}x')
    return '\n'.join(lines)
