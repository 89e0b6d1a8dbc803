"""Memory per GPU of the shipped recipes, and the count checked against a real step.

``python -m benchmarks --memory [CONFIG ...]`` counts (``inline_mm.analysis.memory``, fake CUDA
tensors) every shipped Mask R-CNN, Cascade Mask R-CNN, UperNet, Semantic FPN and SegFormer
recipe, one row per distinct model, input and batch (the ``amp-``, ``amp-bf16-``, ``fsdp-``
and ``ms-crop-3x`` children train their parent's model at its size; ``-slide`` children
differ in testing only), beside mmdet's Swin-T Mask R-CNN, PVT-S in the InLine-PVT-S Mask
R-CNN recipe and mmseg's Swin-T UperNet (``benchmarks/configs/``): training in fp32, AMP
(fp16; bf16 takes the same bytes and is checked to) and both with ``with_cp`` on every
stage, and inference in fp32 and fp16. Outputs: ``memory.csv``, the Markdown table on
stdout, ``meta.json``.

``python -m benchmarks --memory-check`` runs InLine-Swin-T UperNet (batch 2, 512x512, fp32,
the batched path and the multi-tensor optimiser update that GPUs take) for real on the CPU:
after a first step (which creates the optimiser's state), one training step per ``with_cp``
setting (off, stages 0-1, all) under ``torch.profiler`` (``profile_memory``): parameters,
buffers and optimiser state, plus the peak of the tensor bytes the CPU allocator holds during
the step, against the count; then the CPU time of a step per setting, in interleaved rounds
(median; ratio to ``with_cp`` off). Outputs: ``memory_check.csv``, ``meta.json``.
``--quick``: the same model at 128x128, one round.
"""
import re
import statistics
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import torch

from benchmarks.measure import cpu_peak_bytes, write_dict_rows

ROOT = Path(__file__).resolve().parents[1]
GiB = 2 ** 30
#: the Softmax references beside the shipped recipes
REFERENCES = {
    'Swin-T Mask R-CNN (mmdet)': 'benchmarks/configs/mask-rcnn_swin-t_fpn_1x_coco.py',
    'PVT-S Mask R-CNN (mmdet PVT)': 'benchmarks/configs/mask-rcnn_pvt-s_fpn_1x_coco.py',
    'Swin-T UperNet (mmseg)': 'benchmarks/configs/upernet_swin-t_8xb2-160k_ade20k-512x512.py',
}
#: config name parts of the recipes counted, and of the children that share a parent's row
_KINDS = ('mask-rcnn_', 'cascade-mask-rcnn_', '_upernet_', 'fpn_inline-', 'segformer_')
_CHILDREN = ('_amp-', '-amp-', '_fsdp-', '-fsdp-', '_ms-crop-3x_', '-slide.py', 'toy-coco')
CHECK_CONFIG = 'configs/inline_swin/inline-swin-t-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py'
CP_SETTINGS = {'off': False, 'stages 0-1': [0, 1], 'all': True}


def shipped_recipes() -> List[str]:
    """Every shipped recipe the table counts, one per distinct model, input and batch."""
    paths = sorted(ROOT.glob('configs/inline_*/*.py'))
    return [str(p.relative_to(ROOT)) for p in paths
            if any(k in p.name for k in _KINDS) and not any(c in p.name for c in _CHILDREN)]


def count_rows(configs: Sequence[str], names: Optional[Dict[str, str]] = None) -> List[dict]:
    """One row per config: training peak (GiB) in fp32 / fp16 / bf16, and fp32 / fp16 with
    ``with_cp`` on; fp32 activations; inference fp32 / fp16 (empty where a backbone has no
    ``with_cp``)."""
    from inline_mm.analysis.memory import MemoryCounter
    rows = []
    for config in configs:
        start = time.perf_counter()
        with MemoryCounter(str(ROOT / config) if not Path(config).is_absolute() else config) \
                as counter:
            row = dict(recipe=label(config, names), config=config,
                       kind=counter.kind, params_m=round(sum(
                           p.numel() for p in counter.model.parameters()) / 1e6, 1),
                       batch=counter.batch, input='x'.join(map(str, counter.input_hw)))
            for precision in ('fp32', 'fp16', 'bf16'):
                r = counter.train(precision)
                row[f'train_{precision}'] = round(r.peak / GiB, 3)
                if precision == 'fp32':
                    row['activations_fp32'] = round(r.activations / GiB, 3)
            for precision in ('fp32', 'fp16'):
                try:
                    row[f'train_{precision}_cp'] = round(counter.train(precision, True).peak
                                                         / GiB, 3)
                except ValueError:       # a backbone without with_cp
                    row[f'train_{precision}_cp'] = ''
            for precision in ('fp32', 'fp16'):
                r = counter.test(precision)
                row[f'test_{precision}'] = round(r.peak / GiB, 3)
            row['test_input'] = f'{r.batch}x' + 'x'.join(map(str, r.input_hw))
        row['seconds'] = round(time.perf_counter() - start, 1)
        print(f'  {row["recipe"]}: fp32 {row["train_fp32"]} GiB, fp16 {row["train_fp16"]} GiB '
              f'({row["seconds"]} s)', flush=True)
        rows.append(row)
    return rows


_TASKS = (('cascade-mask-rcnn_', 'Cascade Mask R-CNN'), ('mask-rcnn_', 'Mask R-CNN'),
          ('_upernet_', 'UperNet'), ('fpn_inline-', 'Semantic FPN'), ('segformer_', 'SegFormer'))
_ORDER = ('Mask R-CNN', 'Cascade Mask R-CNN', 'UperNet', 'Semantic FPN', 'SegFormer')
_FAMILIES = ('swin', 'pvt', 'cswin', 'deit')
_VARIANTS = 'tsmlb'


def label(config: str, names: Optional[Dict[str, str]] = None) -> str:
    """A row's name: head, backbone (and the dataset of a segmentor), e.g. 'UperNet,
    InLine-Swin-T, Cityscapes'; the references by their names."""
    if names and config in names:
        return names[config]
    name = Path(config).name
    task = next((t for key, t in _TASKS if key in name), None)
    found = re.search(r'inline-([a-z]+)-([a-z])[_-]', name)
    if task is None or found is None or found[1] not in _FAMILIES:     # another config
        return Path(config).stem
    family, variant = found.groups()
    backbone = {'swin': 'Swin', 'pvt': 'PVT', 'cswin': 'CSwin', 'deit': 'DeiT'}[family]
    text = f'{task}, InLine-{backbone}-{variant.upper()}'
    if 'cityscapes' in name:
        text += ', Cityscapes'
    return text


def _order(row: dict):
    name = Path(row['config']).name
    if row['recipe'] == Path(name).stem or 'configs/inline_' not in row['config']:
        return (9, 0, 0, row['recipe'])         # the references and other configs last
    task = next(t for key, t in _TASKS if key in name)
    family, variant = re.search(r'inline-([a-z]+)-([a-z])[_-]', name).groups()
    return ('cityscapes' in name, _ORDER.index(task), _FAMILIES.index(family),
            _VARIANTS.index(variant))


def table(rows: List[dict]) -> str:
    """Markdown: peak training memory per GPU (GiB) and inference, rows by head, family and
    variant (values as :func:`count_rows` gives them, or read back from its CSV)."""
    def gib(value) -> str:
        return '-' if value in ('', None) else f'{float(value):.2f}'

    lines = ['| model | params (M) | batch x input | fp32 | AMP | fp32, with_cp | AMP, with_cp '
             '| inference fp32 / fp16 |', '|---|---|---|---|---|---|---|---|']
    for r in sorted(rows, key=_order):
        amp = gib(r['train_fp16']) if float(r['train_fp16']) == float(r['train_bf16']) else \
            f'{gib(r["train_fp16"])} / {gib(r["train_bf16"])} (bf16)'
        lines.append(f'| {r["recipe"]} | {float(r["params_m"]):.1f} | '
                     f'{r["batch"]} x {r["input"]} | '
                     f'{gib(r["train_fp32"])} | {amp} | {gib(r["train_fp32_cp"])} | '
                     f'{gib(r["train_fp16_cp"])} | {gib(r["test_fp32"])} / '
                     f'{gib(r["test_fp16"])} |')
    return '\n'.join(lines)


# ------------------------------------------------------------------ the check
def _real_model(config: str, cfg_options: dict, device: str):
    from mmengine.config import Config
    from mmengine.model import revert_sync_batchnorm
    from mmengine.optim import build_optim_wrapper
    from mmengine.registry import init_default_scope
    from mmseg.registry import MODELS

    import inline_mm  # noqa: F401
    cfg = Config.fromfile(str(ROOT / config))
    cfg.merge_from_dict(cfg_options)
    init_default_scope('mmseg')
    torch.manual_seed(0)
    model = revert_sync_batchnorm(MODELS.build(cfg.model)).to(device).train()
    return model, build_optim_wrapper(model, cfg.optim_wrapper)


def _batch(b: int, hw, num_classes: int, device: str):
    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample
    torch.manual_seed(0)
    x = torch.randn(b, 3, *hw, device=device)
    samples = []
    for _ in range(b):
        s = SegDataSample(gt_sem_seg=PixelData(data=torch.randint(0, num_classes, (1, *hw),
                                                                  device=device)))
        s.set_metainfo(dict(img_shape=hw, ori_shape=hw, pad_shape=hw))
        samples.append(s)
    return x, samples


def _step_peak(step, held: int, device: str) -> int:
    """The bytes a step holds at its worst moment, what was allocated before included
    (``held`` bytes): on CUDA ``torch.cuda.max_memory_allocated``, on the CPU the allocator's
    peak during the step reported to ``torch.profiler`` plus ``held``."""
    if device == 'cuda':
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated()
    return held + cpu_peak_bytes(step)


def check(config: str = CHECK_CONFIG, cfg_options: Optional[dict] = None, rounds: int = 2,
          settings: Dict[str, object] = CP_SETTINGS, device: str = 'cpu',
          precision: str = 'fp32') -> List[dict]:
    """The count against the allocator and the CPU time of a step (``rounds`` of them; 0: not
    timed), per ``with_cp`` setting (see the module docstring); ``precision`` 'fp16' or
    'bf16' trains through mmengine's ``AmpOptimWrapper`` (CUDA only, as mmengine has it)."""
    from inline_mm.analysis.memory import MemoryCounter
    opts = dict(cfg_options or {})
    # the GPU's path and optimiser update on the CPU: what the count (fake CUDA) runs
    opts.update({'model.backbone.batched': True, 'optim_wrapper.optimizer.foreach': True})
    if precision != 'fp32':
        opts.update({'optim_wrapper.type': 'AmpOptimWrapper',
                     'optim_wrapper.dtype': {'fp16': 'float16', 'bf16': 'bfloat16'}[precision]})
    counted = {}
    with MemoryCounter(str(ROOT / config), opts) as counter:
        for name, cp in settings.items():
            counted[name] = counter.train(precision, cp)
        hw, b = counter.input_hw, counter.batch
    model, optim = _real_model(config, opts, device)
    x, samples = _batch(b, hw, model.decode_head.num_classes, device)

    def step():
        with optim.optim_context(model):
            loss, _ = model.parse_losses(model.loss(x, samples))
        optim.update_params(loss)       # backward, step, and the gradients set to None

    step()              # the optimiser's state exists from the first step on
    state = optim.optimizer.state
    held = sum(t.numel() * t.element_size() for t in
               [*model.parameters(), *model.buffers(), x] + [s.gt_sem_seg.data for s in samples]
               + [v for s in state.values() for v in s.values() if torch.is_tensor(v)])
    rows = []
    for name, cp in settings.items():
        model.backbone.with_cp = cp
        measured = _step_peak(step, held, device)
        c = counted[name]
        rows.append(dict(config=config, device=device, precision=precision, batch=b,
                         input='x'.join(map(str, hw)), with_cp=name,
                         counted_gib=round(c.peak / GiB, 3),
                         measured_gib=round(measured / GiB, 3),
                         ratio=round(c.peak / measured, 3),
                         activations_gib=round(c.activations / GiB, 3)))
        print(f'  with_cp {name}: counted {c.peak / GiB:.3f} GiB, {device} allocator '
              f'{measured / GiB:.3f} GiB (ratio {c.peak / measured:.3f})', flush=True)
    # CPU time on the CPU (one process's share of a loaded machine), wall time on CUDA
    clock = time.perf_counter if device == 'cuda' else time.process_time
    times = {name: [] for name in settings}
    for _ in range(rounds):
        for name, cp in settings.items():
            model.backbone.with_cp = cp
            if device == 'cuda':
                torch.cuda.synchronize()
            start = clock()
            step()
            if device == 'cuda':
                torch.cuda.synchronize()
            times[name].append(clock() - start)
    if rounds:
        base = statistics.median(times['off']) if 'off' in times else None
        for row in rows:
            median = statistics.median(times[row['with_cp']])
            row.update(step_s=round(median, 2),
                       time_ratio=round(median / base, 3) if base else '')
    return rows


def check_table(rows: List[dict]) -> str:
    lines = ['| with_cp | counted (GiB) | allocator (GiB) | counted / measured | activations '
             '(GiB) | step time (s) | time / off |', '|---|---|---|---|---|---|---|']
    for r in rows:
        lines.append(f'| {r["with_cp"]} | {r["counted_gib"]:.3f} | {r["measured_gib"]:.3f} | '
                     f'{r["ratio"]:.3f} | {r["activations_gib"]:.3f} | {r.get("step_s", "-")} | '
                     f'{r.get("time_ratio", "-")} |')
    return '\n'.join(lines)


def write(rows: List[dict], path: Path):
    write_dict_rows(rows, path)
