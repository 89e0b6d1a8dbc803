#!/usr/bin/env python
"""Padding awareness under ``torch.compile``: what it costs in graphs (a benchmark, not a test).

    python -m benchmarks.padded_compile                    # every family's smoke preset
    python -m benchmarks.padded_compile --family InLineSwin --backend aot_eager

Under compile the backbones run the batched path (``inline_mm.models.padding``): the
per-image sizes are a tensor in the graph, so padding awareness needs no graph break and
no recompile per combination of image sizes. This compiles (``dynamic=True``, dynamo's
graph capture with ``--backend``, ``aot_eager`` by default: no code generation) over one
stream of padded batches of 2 images, all on one padded canvas, each batch with other
per-image sizes, fed in three ways:

- ``read``: the model reads the sizes from the input itself (what every config does);
- ``given``: the sizes passed in as Python ints (``valid_sizes=``: the data samples'
  ``img_shape``); dynamo guards on ints, so each new combination may recompile;
- ``unpadded``: the same model over a stream of unpadded batches of as many sizes, for
  comparison.

Per family and form: batches, graphs compiled over the stream (backend calls; also the count
after each batch), the first recompile's failed guard, graph breaks (dynamo's ``graph_break``
counter, with the most frequent reason), the max abs difference from eager padding-aware
outputs, and the capture time.
"""
import argparse
import time

import torch

#: one canvas, per-image sizes of each batch (2 images); every size is at least the
#: smoke presets' minimum input
CANVAS = (96, 96)
PADDED = [[(96, 96), (64, 80)], [(96, 96), (72, 88)], [(80, 96), (96, 64)],
          [(64, 96), (88, 72)], [(96, 80), (72, 96)]]
UNPADDED = [(64, 96), (72, 80), (88, 64), (80, 88), (96, 80)]


def _batch(sizes, generator):
    x = torch.zeros(len(sizes), 3, *CANVAS)
    for i, (h, w) in enumerate(sizes):
        x[i, :, :h, :w] = torch.randn(3, h, w, generator=generator)
    return x


def _forms(model):
    def read(x, sizes):
        return model(x)

    def given(x, sizes):
        return model(x, valid_sizes=sizes)

    def unpadded(x, sizes):
        return model(x)
    return dict(read=read, given=given, unpadded=unpadded)


def run(family: str, backend: str, forms=('read', 'given', 'unpadded'), batches: int = 5):
    import torch._dynamo
    import torch._dynamo.testing
    from torch._dynamo.utils import counters, guard_failures

    from inline_mm.models import FAMILIES
    spec = FAMILIES[family]
    torch.manual_seed(0)
    model = spec.cls(**spec.smoke).eval()
    rows = []
    for form, fn in _forms(model).items():
        if form not in forms:
            continue
        gen = torch.Generator().manual_seed(0)
        if form == 'unpadded':
            stream = [(torch.randn(2, 3, *s, generator=gen), None) for s in UNPADDED[:batches]]
        else:
            stream = [(_batch(sizes, gen), sizes) for sizes in PADDED[:batches]]
        torch._dynamo.reset()
        counters['graph_break'].clear()
        guard_failures.clear()
        counter = torch._dynamo.testing.CompileCounterWithBackend(backend)
        compiled = torch.compile(fn, backend=counter, dynamic=True)
        err, start, after = 0., time.perf_counter(), []
        with torch.no_grad():
            for x, sizes in stream:
                ref = model(x, valid_sizes=sizes)
                got = compiled(x, sizes)
                err = max([err] + [float((g - r).abs().max()) for g, r in zip(got, ref)])
                after.append(str(counter.frame_count))
        breaks = sorted(counters['graph_break'].items(), key=lambda kv: -kv[1])
        reasons = [str(r) for code in list(guard_failures) for r in guard_failures[code]]
        rows.append(dict(family=family, form=form, batches=len(stream),
                         graphs=counter.frame_count, graphs_after_each='/'.join(after),
                         breaks=sum(n for _, n in breaks),
                         first_break=breaks[0][0].splitlines()[0][:80] if breaks else '-',
                         first_recompile=reasons[0].splitlines()[0][:120] if reasons else '-',
                         max_abs_err=f'{err:.1e}',
                         capture_s=round(time.perf_counter() - start, 1)))
        print(' '.join(f'{k}={v}' for k, v in rows[-1].items()), flush=True)
    return rows


def main(argv=None):
    from inline_mm.models import FAMILIES
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--family', nargs='+', default=list(FAMILIES), choices=list(FAMILIES))
    parser.add_argument('--backend', default='aot_eager')
    parser.add_argument('--forms', nargs='+', default=['read', 'given', 'unpadded'],
                        choices=['read', 'given', 'unpadded'])
    parser.add_argument('--batches', type=int, default=len(PADDED), help='of the stream')
    args = parser.parse_args(argv)
    return [row for family in args.family
            for row in run(family, args.backend, args.forms, args.batches)]


if __name__ == '__main__':
    main()
