"""Whole-image inference at the resolutions InLine is for (``python -m benchmarks
--resolution``): 512x1024, 1024x2048 (a whole Cityscapes image) and 2048x4096.

Two parts, each timed by :func:`.backbones.run_backbones` (interleaved rounds, medians,
peak memory, predicted skips; inference only, batch 1, random weights):

  backbone    the backbone alone;
  segmentor   the whole segmentor of the shipped Cityscapes recipe, whole-image inference
              (``EncoderDecoder.inference``: backbone, head, logits resized to the input):
              UperNet (configs/inline_swin/inline-swin-t-in1k-pre_upernet_4xb2-80k_
              cityscapes-512x1024.py) around the Swin-T-sized backbones, Semantic FPN
              (configs/inline_pvt/fpn_inline-pvt-s_4xb2-80k_cityscapes-512x1024.py) around
              the PVT-S-sized ones, the backbone swapped in.

Backbones:

  InLine-Swin-T   InLineSwin(arch='tiny'): global InLine stages 1-3, window-7 stage 4
  Swin-T          mmseg's SwinTransformer, Swin-T layout: shifted 7x7 windows everywhere
  Swin-T-global   InLine-Swin-T with every InLine attention replaced, in the benchmark
                  only, by global Softmax attention over the same qkv/proj
                  (``F.scaled_dot_product_attention``, :func:`.backbones.build_swin_t_global`):
                  what InLine's global attention would cost as Softmax
  InLine-PVT-S    InLinePVT(arch='small'): global InLine, no spatial reduction
  PVT-S           mmdet's PyramidVisionTransformer, PVT-S layout (spatial-reduction Softmax)

Each model is first probed at half each side of the smallest size (not reported), so that
every size, the smallest included, is predicted from the sizes below it and skipped, saying
so, when one run would exceed ``--max-run-s`` or the memory limit.
"""
import csv
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Dict, List, Sequence

import torch
import torch.nn as nn

from . import backbones
from .backbones import (STYLES, TIMING_COLUMNS, Result, _size, log_log_axes, run_backbones,
                        save_figure, sizes_of, timing_cells)
from .measure import free_memory

__all__ = ['FULL_SIZES', 'QUICK_SIZES', 'MODELS', 'PARTS', 'PAIRS', 'UPERNET', 'FPN',
           'build', 'run', 'table', 'write_csv', 'plot']

ROOT = Path(__file__).resolve().parents[1]
FULL_SIZES = [(512, 1024), (1024, 2048), (2048, 4096)]
QUICK_SIZES = [(64, 128)]
PARTS = ('backbone', 'segmentor')
UPERNET = (ROOT / 'configs/inline_swin'
           / 'inline-swin-t-in1k-pre_upernet_4xb2-80k_cityscapes-512x1024.py')
FPN = ROOT / 'configs/inline_pvt/fpn_inline-pvt-s_4xb2-80k_cityscapes-512x1024.py'


def build_swin_t_mmseg() -> nn.Module:
    from mmseg.models.backbones import SwinTransformer
    return SwinTransformer(embed_dims=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24),
                           window_size=7, drop_path_rate=0.)


#: name -> (backbone builder, what its attention is, the segmentor config it sits in)
MODELS: Dict[str, tuple] = {
    'InLine-Swin-T': (backbones.build_inline_swin_t, 'InLine, global', UPERNET),
    'Swin-T': (build_swin_t_mmseg, 'Softmax, shifted windows 7x7 (mmseg)', UPERNET),
    'Swin-T-global': (backbones.build_swin_t_global,
                      'Softmax, global SDPA (InLine-Swin-T layout, benchmark only)', UPERNET),
    'InLine-PVT-S': (backbones.build_inline_pvt_s, 'InLine, global', FPN),
    'PVT-S': (backbones.build_pvt_s, 'Softmax, spatial reduction (mmdet)', FPN),
}
#: (InLine model, baseline) pairs whose ratios are reported
PAIRS = [('InLine-Swin-T', 'Swin-T'), ('InLine-Swin-T', 'Swin-T-global'),
         ('InLine-PVT-S', 'PVT-S')]


class WholeImage(nn.Module):
    """A segmentor's whole-image inference (its ``inference``, test mode 'whole') as a
    module returning its logits in a one-tuple: the step the benchmark times."""

    def __init__(self, segmentor: nn.Module):
        super().__init__()
        self.segmentor = segmentor

    def forward(self, x: torch.Tensor):
        shape = tuple(x.shape[2:])
        metas = [dict(img_shape=shape, ori_shape=shape, pad_shape=shape)] * x.shape[0]
        return (self.segmentor.inference(x, metas),)


def build_segmentor(name: str) -> nn.Module:
    """The shipped Cityscapes segmentor of ``name``'s family (UperNet or Semantic FPN, 19
    classes, whole-image inference) with ``name``'s backbone, plain BatchNorm."""
    from mmengine.config import Config
    from mmengine.model import revert_sync_batchnorm
    from mmengine.registry import DefaultScope
    from mmseg.registry import MODELS as SEG_MODELS
    builder, _, config = MODELS[name]
    cfg = Config.fromfile(str(config))
    cfg.model.backbone.init_cfg = None
    cfg.model.test_cfg = dict(mode='whole')
    with DefaultScope.overwrite_default_scope('mmseg'):
        segmentor = SEG_MODELS.build(cfg.model)
    segmentor.backbone = builder()
    return WholeImage(revert_sync_batchnorm(segmentor))


def build(part: str, names: Sequence[str], device: torch.device) -> Dict[str, nn.Module]:
    make: Callable[[str], nn.Module] = (
        (lambda n: MODELS[n][0]()) if part == 'backbone' else build_segmentor)
    models = {name: make(name).to(device) for name in names}
    for model in models.values():
        model.eval()        # (mmseg's Swin returns None from train(): no chaining)
    return models


def run(args, device: torch.device) -> List[Result]:
    """Both parts on ``device``; each result's ``model`` is ``'<part>: <name>'``."""
    results = []
    for part in PARTS:
        models = build(part, args.models, device)
        print(f'\n{device.type.upper()} {part}: sizes '
              f'{", ".join(_size(s) for s in args.sizes)}; {args.warmup} warm-up + '
              f'{args.repeats} timed runs each, batch {args.batch}', flush=True)
        part_args = SimpleNamespace(**{**vars(args), 'modes': ['inference']})
        for res in run_backbones(part_args, device, models, probe=True):
            res.model = f'{part}: {res.model}'
            results.append(res)
        del models
        free_memory(device)
    return results


def _split(res: Result):
    part, name = res.model.split(': ', 1)
    return part, name


def _cell(res) -> str:
    if res is None:
        return '-'
    if res.median is None:
        return 'skipped' if res.status.startswith('skipped') else res.status
    return f'{res.median * 1e3:.0f} [{res.peak_bytes / 2 ** 20:.0f}]'


def table(results: List[Result], names: Sequence[str]) -> str:
    """Per device and part: median ms [peak MiB] per size and model, the ratios of
    :data:`PAIRS`, and the reasons of every skip."""
    by_key = {(r.device, *_split(r), r.size): r for r in results}
    sizes = sizes_of(results)
    lines = []
    for dev in sorted({r.device for r in results}):
        for part in PARTS:
            lines.append(f'\n{dev.upper()} {part}, whole-image inference: median ms '
                         '[peak MiB]')
            lines.append(f'{"size":>10s}' + ''.join(f'{n:>16s}' for n in names))
            for size in sizes:
                lines.append(f'{_size(size):>10s}' + ''.join(
                    f'{_cell(by_key.get((dev, part, n, size))):>16s}' for n in names))
            pairs = [(a, b) for a, b in PAIRS if a in names and b in names]
            if pairs:
                lines.append(f'{"":>10s}  baseline / InLine: time, memory (> 1: InLine '
                             'faster / smaller)')
                lines.append(f'{"size":>10s}' + ''.join(f'{b + " / " + a:>32s}'
                                                        for a, b in pairs))
                for size in sizes:
                    row = f'{_size(size):>10s}'
                    for a, b in pairs:
                        ra = by_key.get((dev, part, a, size))
                        rb = by_key.get((dev, part, b, size))
                        cell = '-'
                        if ra and rb and ra.median and rb.median:
                            cell = (f'{rb.median / ra.median:.2f}x, '
                                    f'{rb.peak_bytes / max(ra.peak_bytes, 1):.2f}x')
                        row += f'{cell:>32s}'
                    lines.append(row)
            for r in results:
                if r.device == dev and _split(r)[0] == part and r.status != 'ok':
                    lines.append(f'  {_split(r)[1]} at {_size(r.size)}: {r.status}')
    return '\n'.join(lines)


def write_csv(results: List[Result], path: Path, batch: int, mem_methods: Dict[str, str]):
    with open(path, 'w', newline='') as f:
        w = csv.writer(f)
        w.writerow(['device', 'part', 'model', 'attention', 'height', 'width', 'megapixels',
                    'batch', 'threads', *TIMING_COLUMNS, 'memory_method', 'status'])
        for r in results:
            part, name = _split(r)
            w.writerow([r.device, part, name, MODELS[name][1], r.size[0], r.size[1],
                        f'{r.pixels / 1e6:.4f}', batch, torch.get_num_threads(),
                        *timing_cells(r), mem_methods[r.device], r.status])


def plot(results: List[Result], path: Path, title: str):
    """Time and peak memory against megapixels (log-log), backbone and segmentor, per
    device; a skipped size is marked where the model's line stops."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401  (matplotlib.ticker below)
    devices = sorted({r.device for r in results})
    fig, axes = plt.subplots(len(devices) * 2, len(PARTS), figsize=(11, 8.5 * len(devices)),
                             squeeze=False)
    for i, dev in enumerate(devices):
        for j, part in enumerate(PARTS):
            for k, (what, unit) in enumerate((('time', 'median time (ms)'),
                                              ('memory', 'peak memory (MiB)'))):
                ax = axes[2 * i + k][j]
                for name in MODELS:
                    rows = [r for r in results if r.device == dev and _split(r) == (part, name)]
                    pts = sorted((r.pixels / 1e6, r.median * 1e3 if what == 'time'
                                  else r.peak_bytes / 2 ** 20) for r in rows if r.median)
                    if not pts:
                        continue
                    color, marker, ls = STYLES[name]
                    ax.plot(*zip(*pts), marker=marker, linestyle=ls, color=color, label=name)
                    skipped = [r for r in rows if r.median is None]
                    if skipped:
                        ax.annotate('skipped beyond', pts[-1], textcoords='offset points',
                                    xytext=(4, -10), fontsize=7, color=color)
                log_log_axes(ax, 'input size (log of pixels)', unit,
                             f'{dev.upper()} {part}, whole-image inference: {what}')
                sizes = sizes_of(results)
                ax.set_xticks([h * w / 1e6 for h, w in sizes], [_size(z) for z in sizes])
                ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    save_figure(fig, path, title, dpi=100)
