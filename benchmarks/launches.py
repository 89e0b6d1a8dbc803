"""Ops per forward and host reads (``python -m benchmarks --launches``).

On a GPU every aten op a forward dispatches is (at least) one kernel launch of a few
microseconds, and every read of a device value on the host (``.item()``, ``.tolist()``,
``bool(t)``) waits for the device to finish. A backbone whose op count grows with the
batch, or that reads back sizes in every forward, is launch-bound at the batch sizes
detection trains with. This counts both, on the CPU (the ops are the same on any
device; no GPU is needed to count them):

* ops: every aten op dispatched during one ``no_grad`` forward (a
  ``TorchDispatchMode``; views and other metadata ops included, as the issue that asked
  for this counted them);
* host reads: ``aten._local_scalar_dense`` and ``aten.is_nonzero`` dispatches plus
  ``Tensor.tolist`` / ``Tensor.numpy`` calls during the forward;

for every family at its ``tiny`` preset (``--quick``: its ``smoke`` configuration) on
both paths (``batched`` and ``per-sample``; docs/padding.md, "Two paths"), at batch
1, 2 and 8, unpadded and padded (image ``i`` of ``B`` is ``1 - i / (2B)`` of each side,
rounded down to a multiple of 32), beside mmdet's Swin-T and PVT-T, which launch the
same number of ops at any batch size.

:func:`autocast_counts` counts what a GPU would dispatch under CUDA fp16 and bf16 autocast,
on fake CUDA tensors (no GPU needed): ops, dtype conversions (:func:`is_conversion`) and
products run in the low dtype per block, one forward per fresh autocast region, so every
weight's cast counts as in a training step (``python -m benchmarks.precision`` prints them).
"""
import copy
import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Sequence, Tuple

import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from inline_mm.models import FAMILIES

__all__ = ['BATCHES', 'SIZE', 'QUICK_SIZE', 'PATHS', 'Op', 'OpCounter', 'count', 'padded_sizes',
           'make_batch', 'Row', 'run', 'table', 'write_csv', 'PRODUCTS', 'AUTOCAST',
           'is_conversion', 'AutocastCount', 'count_autocast', 'autocast_counts', 'autocast_table']

BATCHES = (1, 2, 8)
SIZE, QUICK_SIZE = (320, 320), (96, 96)
#: path name -> the backbones' ``batched`` argument
PATHS = {'batched': True, 'per-sample': False}
_READS = ('_local_scalar_dense', 'is_nonzero')


@dataclass(frozen=True)
class Op:
    """One dispatched aten op as :class:`OpCounter` records it: its name, and the dtypes
    and devices of the tensors among its arguments and its outputs."""

    name: str
    dtypes: Tuple[torch.dtype, ...]
    devices: Tuple[str, ...]
    out_dtypes: Tuple[torch.dtype, ...]
    out_devices: Tuple[str, ...]


def _tensors(tree) -> List[torch.Tensor]:
    return [t for t in tree_leaves(tree) if isinstance(t, torch.Tensor)]


class OpCounter(TorchDispatchMode):
    """Counts the aten ops dispatched, and the host reads, while active; with
    ``record=True`` it also keeps each op (:class:`Op`) in :attr:`seen`, in order."""

    def __init__(self, record: bool = False):
        super().__init__()
        self.ops = 0
        self.reads = 0
        self.record = record
        self.seen: List[Op] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        if func.__name__.split('.')[0] in _READS:
            self.reads += 1
        out = func(*args, **(kwargs or {}))
        if self.record:
            ins, outs = _tensors((args, kwargs)), _tensors(out)
            self.seen.append(Op(str(func), tuple(t.dtype for t in ins),
                                tuple(t.device.type for t in ins),
                                tuple(t.dtype for t in outs), tuple(t.device.type for t in outs)))
        return out

    def __enter__(self):
        # tolist/numpy read a CPU tensor's memory without dispatching: wrap them.
        self._patched = {}
        for name in ('tolist', 'numpy'):
            original = getattr(torch.Tensor, name)
            self._patched[name] = original

            def reading(t, *a, _original=original, **k):
                self.reads += 1
                return _original(t, *a, **k)

            setattr(torch.Tensor, name, reading)
        return super().__enter__()

    def __exit__(self, *exc):
        for name, original in self._patched.items():
            setattr(torch.Tensor, name, original)
        return super().__exit__(*exc)


def count(model: nn.Module, x: torch.Tensor) -> Tuple[int, int]:
    """``(ops, host reads)`` of one ``no_grad`` forward of ``model`` on ``x``."""
    with torch.no_grad(), OpCounter() as counter:
        model(x)
    return counter.ops, counter.reads


def padded_sizes(size: Tuple[int, int], batch: int) -> List[Tuple[int, int]]:
    """Image ``i`` of ``batch``: ``1 - i / (2 batch)`` of each side, rounded down to a
    multiple of 32 (image 0 fills the canvas)."""
    return [tuple(max(32, int(side * (1 - i / (2 * batch))) // 32 * 32) for side in size)
            for i in range(batch)]


def make_batch(size: Tuple[int, int], batch: int, padded: bool, seed: int = 0) -> torch.Tensor:
    """Random normal images (never exactly 0) on a ``size`` canvas, zero-padded."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, 3, *size, generator=gen)
    if padded:
        for i, (h, w) in enumerate(padded_sizes(size, batch)):
            x[i, :, h:] = 0
            x[i, :, :, w:] = 0
    return x


def _mmdet_swin_t() -> nn.Module:
    from mmdet.models.backbones import SwinTransformer
    return SwinTransformer(embed_dims=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24),
                           window_size=7, drop_path_rate=0.)


def _mmdet_pvt_t() -> nn.Module:
    from mmdet.models.backbones import PyramidVisionTransformer
    return PyramidVisionTransformer(num_layers=[2, 2, 2, 2], drop_path_rate=0.)


#: mmdet's backbones the families are compared with
REFERENCES: Dict[str, Callable[[], nn.Module]] = {
    'mmdet Swin-T': _mmdet_swin_t, 'mmdet PVT-T': _mmdet_pvt_t}


@dataclass
class Row:
    model: str
    path: str
    padded: bool
    batch: int
    ops: int
    reads: int


def _family(name: str, quick: bool, batched: bool) -> nn.Module:
    family = FAMILIES[name]
    kwargs = dict(family.smoke) if quick else dict(arch='tiny')
    kwargs.update(drop_path_rate=0., batched=batched)
    return family.cls(**kwargs).eval()


def run(names: Sequence[str], quick: bool = False, batches: Sequence[int] = BATCHES,
        references: bool = True, log=print) -> List[Row]:
    """Count every (model, path, padded, batch); the families at ``tiny`` (``quick``:
    ``smoke``), mmdet's references at their real size (not with ``quick``)."""
    size = QUICK_SIZE if quick else SIZE
    rows = []
    torch.manual_seed(0)
    models = [(name, path, _family(name, quick, batched)) for name in names
              for path, batched in PATHS.items()]
    if references and not quick:
        for name, build in REFERENCES.items():
            model = build()
            model.eval()              # mmdet's Swin overrides train() without returning self
            models.append((name, '', model))
    for name, path, model in models:
        for padded in (False, True):
            for b in batches:
                if padded and b == 1:
                    continue                       # one image fills its own canvas
                ops, reads = count(model, make_batch(size, b, padded))
                rows.append(Row(name, path, padded, b, ops, reads))
                log(f'  {name} {path or "-"} {"padded" if padded else "unpadded"} B={b}: '
                    f'{ops} ops, {reads} host read(s)', flush=True)
    return rows


def growth(rows: Sequence[Row], model: str, path: str, padded: bool) -> float:
    """Ops at the largest batch / ops at batch 2 (1 where unpadded batch 2 is missing)."""
    ops = {r.batch: r.ops for r in rows if (r.model, r.path, r.padded) == (model, path, padded)}
    return ops[max(ops)] / ops[2]


def table(rows: Sequence[Row]) -> str:
    """Markdown: ops (host reads) per model and path, unpadded and padded, by batch."""
    batches = sorted({r.batch for r in rows})
    head = ['model', 'path'] + [f'{"padded" if p else "unpadded"} B={b}' for p in (False, True)
                                for b in batches if not (p and b == 1)] + ['B=2 -> B=8, padded']
    lines = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
    keys = list(dict.fromkeys((r.model, r.path) for r in rows))
    for model, path in keys:
        cells = [model, path or '-']
        for padded in (False, True):
            for b in batches:
                if padded and b == 1:
                    continue
                r = [r for r in rows
                     if (r.model, r.path, r.padded, r.batch) == (model, path, padded, b)]
                cells.append(f'{r[0].ops:,} ({r[0].reads})' if r else '-')
        padded_rows = [r for r in rows if (r.model, r.path, r.padded) == (model, path, True)]
        cells.append(f'{growth(rows, model, path, True):.2f}x' if len(padded_rows) > 1 else '-')
        lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def write_csv(rows: Sequence[Row], path: Path):
    with open(path, 'w', newline='') as f:
        w = csv.writer(f)
        w.writerow(['model', 'path', 'padded', 'batch', 'ops', 'host_reads'])
        for r in rows:
            w.writerow([r.model, r.path, int(r.padded), r.batch, r.ops, r.reads])


# ----------------------------------------------------------- autocast on fake CUDA
#: the products autocast runs in its low dtype on CUDA
PRODUCTS = ('aten.mm.', 'aten.addmm.', 'aten.bmm.', 'aten.baddbmm.', 'aten.convolution.',
            'aten._scaled_dot_product')
#: the autocast dtypes counted
AUTOCAST = {'fp16': torch.float16, 'bf16': torch.bfloat16}
AUTOCAST_SIZE = (224, 320)


def is_conversion(op: Op) -> bool:
    """A copy of floating-point data into another floating-point dtype (a cast autocast
    or the model makes; ``copy_`` into a tensor of another dtype too)."""
    if not op.name.startswith(('aten._to_copy.', 'aten.copy_.', 'aten.to.')):
        return False
    dtypes = set(op.dtypes) | set(op.out_dtypes)
    return len(dtypes) > 1 and all(d.is_floating_point for d in dtypes)


@dataclass
class AutocastCount:
    """One forward of a family on fake CUDA under autocast, per block: ops dispatched,
    dtype conversions among them, and products (:data:`PRODUCTS`) run in the low dtype."""

    model: str
    dtype: str
    blocks: int
    ops: int
    conversions: int
    low_products: int
    products: int

    @property
    def ops_per_block(self) -> float:
        return self.ops / self.blocks

    @property
    def conversions_per_block(self) -> float:
        return self.conversions / self.blocks


def count_autocast(model: nn.Module, dtype: torch.dtype, size=AUTOCAST_SIZE,
                   batch: int = 1) -> Tuple[OpCounter, int]:
    """One ``no_grad`` forward of a copy of ``model`` on fake CUDA under CUDA autocast to
    ``dtype``, in a fresh autocast region (its weight casts counted, as in a training step);
    the recorder and the model's blocks (modules with an ``attn_type``)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from inline_mm.analysis.memory import cuda_autocast
    blocks = sum(1 for m in model.modules() if hasattr(m, 'attn_type'))
    model = copy.deepcopy(model).eval()
    with FakeTensorMode(allow_non_fake_inputs=True):
        net = model.to('cuda')
        x = torch.randn(batch, 3, *size, device='cuda')
        with torch.no_grad(), cuda_autocast(dtype), OpCounter(record=True) as counter:
            net(x)
    return counter, blocks


def autocast_counts(names: Sequence[str] = tuple(FAMILIES), quick: bool = False,
                    log=print) -> List[AutocastCount]:
    """:class:`AutocastCount` of every family (``tiny``; ``quick``: ``smoke``) under fp16
    and bf16 autocast."""
    rows = []
    for name in names:
        family = FAMILIES[name]
        torch.manual_seed(0)
        kwargs = dict(family.smoke) if quick else dict(arch='tiny')
        model = family.cls(**dict(kwargs, drop_path_rate=0.))
        for label, dtype in AUTOCAST.items():
            counter, blocks = count_autocast(model, dtype)
            products = [op for op in counter.seen if op.name.startswith(PRODUCTS)]
            rows.append(AutocastCount(
                name, label, blocks, counter.ops, sum(map(is_conversion, counter.seen)),
                sum(dtype in op.out_dtypes for op in products), len(products)))
            log(f'  {name} {label}: {rows[-1].ops_per_block:.1f} ops and '
                f'{rows[-1].conversions_per_block:.1f} conversions per block', flush=True)
    return rows


def autocast_table(rows: Sequence[AutocastCount]) -> str:
    """Markdown: per family and dtype, ops and conversions per block, low products."""
    lines = ['| model | autocast | blocks | ops / block | conversions / block | '
             'products in the low dtype |', '|---|---|---|---|---|---|']
    for r in rows:
        lines.append(f'| {r.model} | {r.dtype} | {r.blocks} | {r.ops_per_block:.1f} | '
                     f'{r.conversions_per_block:.1f} | {r.low_products} of {r.products} |')
    return '\n'.join(lines)
