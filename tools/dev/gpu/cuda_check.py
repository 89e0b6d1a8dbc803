"""CUDA checks for a GPU machine, no compiler needed (run by ``tools/dev/gpu/cuda_check.sh``).

1. mmcv's compiled entry points through inline_mm's torchvision fallback on CUDA (nms,
   RoIAlign forward/backward) against the CPU results and the recorded compiled-mmcv
   references;
2. every InLine backbone's forward and backward on CUDA against the same weights on CPU (fp32),
   which runs the fast attention's CUDA path;
3. one AMP step (fp16 + GradScaler, mmengine's ``AmpOptimWrapper``) of the shipped Mask R-CNN
   and UperNet AMP configs at real size, losses finite; and the ``amp-bf16`` Mask R-CNN trained
   4 iterations on the toy COCO set with ``tools/train.py`` (compiled mmcv's RoIAlign in bf16
   where it is installed: the patch row ``mmcv_ops_bf16``), then evaluated with ``tools/test.py
   --cfg-options test_cfg.fp16=True`` (fp16 autocast; ``--only mask_rcnn_bf16``);
4. ``python -m benchmarks --quick`` on CUDA;
5. ``torch.compile`` (Inductor, default options) of every family's smoke preset, forward, over
   a stream of three sizes (``benchmarks.compile``): compile time per new size, graphs, error
   vs eager;
6. the paper's switches (``inline_cfg``: linear attention, kernels, windows, no local residual)
   forward and backward on the device against CPU, and finite under fp16 autocast;
7. the figures of ``tools/benchmark.py`` on the device: padding awareness on a padded
   800x1333 batch (every family, inference and training) and InLineAttention against its
   own linears (``benchmarks.padding``, ``benchmarks.floor``);
8. the stand-in's sigmoid focal loss and multi-scale deformable attention, which mmdet and
   mmcv call only on CUDA tensors: through mmcv's CUDA-branch functions and through the
   modules (mmdet's ``FocalLoss``, mmcv's ``MultiScaleDeformableAttention``) on the device,
   against the CPU's PyTorch paths, forward and gradients;
9. one fp32 training iteration each of the shipped RetinaNet, DINO and Mask2Former
   (instance) configs at real size, losses finite, with the ``mmcv._ext`` functions the
   iteration called (recorded by the stand-in);
10. the batched path (``batched``: every family's default on CUDA) against the per-sample
    path on the device, padded batches of 2 and 8, forward and backward; no
    device-to-host sync in a padded batched forward (``torch.cuda.set_sync_debug_mode
    ('error')``); ops per forward on the device; CUDA-event times of both paths,
    forward + backward, at B = 2 and 8 (``--only batched``);
11. the toy Mask R-CNN (``inline_mm.deploy.toy``) exported to ONNX and built into a TensorRT
    fp16 engine (``--only tensorrt``; needs the ``tensorrt`` package, e.g.
    ``pip install tensorrt-cu13``): its detections on a padded batch against ONNX Runtime's;
12. the memory count before the run (``inline_mm.analysis.memory``, fake tensors) against
    ``torch.cuda.max_memory_allocated`` of a real step: InLine-Swin-T UperNet, batch 2,
    512x512, fp32 and fp16 AMP, ``with_cp`` off, stages 0-1 and all (``benchmarks.memory``;
    ``--only memory``);
13. the pairs of ``python -m benchmarks.precision`` (InLine-Swin-T / Swin-T, InLine-PVT-S /
    PVT-S, InLine-DeiT-B / DeiT-S, each family against itself with every stage Softmax)
    under fp16 and bf16 autocast, forward and forward + backward, 800x1280 and 1024x2048:
    CUDA-event times and counterpart / InLine (``--only precision``).

Check 2 runs every backbone on a padded batch too (the padding-aware kernel on the device).

What needs no device (no CPU tensor in the batched path, no host read, autocast dtypes, the
path taken) is checked on every CI run on fake CUDA tensors: ``pytest -m fake_cuda``
(tests/test_fake_cuda.py). This script keeps what needs a real device: numbers, syncs, times.

Prints one line per check and a summary; exits non-zero if any check fails.  ``--only
KEY[,KEY...]`` runs some checks (``--list`` names them).  ``--device cpu`` runs the same code
on CPU (fp32 steps instead of AMP, smaller inputs) to check the script itself.
"""
import argparse
import math
import os
import runpy
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

import _inline_mm_mmcv_hook  # noqa: E402

_inline_mm_mmcv_hook.install()  # PYTHONPATH dirs do not run .pth files

import torch  # noqa: E402

RESULTS = []


def check(name):
    def wrap(fn):
        def run(*args):
            start = time.perf_counter()
            try:
                detail = fn(*args)
                RESULTS.append((name, True))
                print(f'ok   {name} ({time.perf_counter() - start:.1f} s): {detail}', flush=True)
            except Exception as e:
                RESULTS.append((name, False))
                traceback.print_exc()
                print(f'FAIL {name}: {type(e).__name__}: {e}', flush=True)
        return run
    return wrap


def rel_err(a, b):
    return ((a.float().cpu() - b.float().cpu()).abs().max()
            / b.float().cpu().abs().max().clamp_min(1e-12)).item()


@check('mmcv ops (torchvision fallback) on device vs CPU and compiled-mmcv references')
def check_ops(device):
    from mmcv.ops import batched_nms, nms, roi_align
    ref = torch.load(ROOT / 'tests' / 'data' / 'mmcv_ops_reference.pth', weights_only=True)
    worst = 0.
    for case in ref['nms']:
        keep = nms(case['boxes'].to(device), case['scores'].to(device), case['iou'])[1].cpu()
        assert sorted(keep.tolist()) == sorted(case['keep'].tolist()), case['name']
    for case in ref['batched_nms']:
        keep = batched_nms(case['boxes'].to(device), case['scores'].to(device),
                           case['idxs'].to(device), dict(case['nms_cfg']))[1].cpu()
        assert sorted(keep.tolist()) == sorted(case['keep'].tolist()), case['name']
    for case in ref['roi_align']:
        feats = case['feats'].to(device).clone().requires_grad_()
        out = roi_align(feats, case['rois'].to(device), case['output_size'],
                        case['spatial_scale'], case['sampling_ratio'], 'avg', case['aligned'])
        if out.numel():
            out.backward(case['grad_output'].to(device))
            worst = max(worst, (out.detach().cpu() - case['output']).abs().max().item(),
                        (feats.grad.cpu() - case['grad_input']).abs().max().item())
    assert worst < 1e-4, worst
    return (f"{len(ref['nms']) + len(ref['batched_nms'])} nms keep-sets identical, "
            f"{len(ref['roi_align'])} roi_align cases max abs err {worst:.1e}")


def device_vs_cpu(model, x, device):
    """Relative error of ``model``'s outputs and input gradient (of the mean squares of the
    outputs) on ``device`` against CPU, same weights; the model is left on ``device``."""
    outs = {}
    for dev in ('cpu', device):
        m = model.to(dev)
        m.zero_grad()
        xi = x.to(dev).requires_grad_()
        y = m(xi)
        sum((o.float() ** 2).mean() for o in y).backward()
        outs[dev] = ([o.detach().cpu() for o in y], xi.grad.cpu())
    fwd = max(rel_err(a, b) for a, b in zip(outs[device][0], outs['cpu'][0]))
    return fwd, rel_err(outs[device][1], outs['cpu'][1])


@check('InLine backbones: forward + backward on device vs CPU (fp32)')
def check_backbones(device):
    from inline_mm.models import FAMILIES
    lines = []
    for family in FAMILIES.values():  # every family, at its tiny preset
        cfg = dict(type=family.name, arch='tiny')
        torch.manual_seed(0)
        model = family.cls(arch='tiny').eval()
        x = torch.randn(2, 3, 224, 320)
        padded = x.clone()
        padded[1, :, 168:] = 0                  # image 1 is 168x240 of the 224x320 batch
        padded[1, :, :, 240:] = 0
        fwd, bwd = device_vs_cpu(model, x, device)
        assert fwd < 1e-4 and bwd < 1e-3, (cfg['type'], fwd, bwd)
        pfwd, pbwd = device_vs_cpu(model, padded, device)
        assert pfwd < 1e-4 and pbwd < 1e-3, (cfg['type'], 'padded', pfwd, pbwd)
        lines.append(f"{cfg['type']} fwd {fwd:.1e} bwd {bwd:.1e} (padded {pfwd:.1e} "
                     f"{pbwd:.1e})")
    return '; '.join(lines)


@check("the paper's switches (inline_cfg): forward + backward on device vs CPU, and fp16")
def check_switches(device):
    """Linear attention and the kernels (plain ops), windows, no local residual: the code
    paths the default model does not take, on the device against CPU, then one fp16
    autocast forward + backward that must stay finite (the guarded normaliser)."""
    from inline_mm.models import FAMILIES
    family = FAMILIES['InLineSwin']
    lines = []
    for switches in (dict(attention='linear', kernel='relu'), dict(kernel='exp'),
                     dict(window_size=7, local_residual=False),
                     dict(attention='linear', kernel='leakyrelu', window_size=14)):
        torch.manual_seed(0)
        model = family.cls(**family.smoke, inline_cfg=switches).eval()
        x = torch.randn(2, 3, 160, 224)
        fwd, bwd = device_vs_cpu(model, x, device)
        assert fwd < 1e-4 and bwd < 1e-3, (switches, fwd, bwd)
        if device != 'cpu':
            xi = x.to(device).requires_grad_()
            with torch.autocast('cuda', dtype=torch.float16):
                y = model.to(device)(xi)
            sum((o.float() ** 2).mean() for o in y).backward()
            assert all(torch.isfinite(o).all() for o in y) and torch.isfinite(xi.grad).all()
        lines.append(f"{','.join(f'{k}={v}' for k, v in switches.items())} fwd {fwd:.1e} "
                     f"bwd {bwd:.1e}")
    return '; '.join(lines)


def amp_step(config, data_fn, device, scope, adjust=None):
    from mmengine.config import Config
    from mmengine.optim import build_optim_wrapper
    from mmengine.registry import DefaultScope
    import inline_mm  # noqa: F401
    cfg = Config.fromfile(str(ROOT / config))
    cfg.model.backbone.init_cfg = None  # no ImageNet file on the test machine
    if adjust is not None:
        adjust(cfg)
    if device == 'cpu' and cfg.optim_wrapper.type == 'AmpOptimWrapper':
        # AmpOptimWrapper is CUDA-only in mmengine: plain fp32 step
        cfg.optim_wrapper.type = 'OptimWrapper'
        cfg.optim_wrapper.pop('loss_scale', None)
    with DefaultScope.overwrite_default_scope(scope):
        registry = __import__(f'{scope}.registry', fromlist=['MODELS']).MODELS
        model = registry.build(cfg.model)
        model.init_weights()            # the heads' own initialisation (focal-loss priors ...)
        model = model.to(device)
        if device == 'cpu':
            from mmengine.model import revert_sync_batchnorm
            model = revert_sync_batchnorm(model)
        model.train()
        optim = build_optim_wrapper(model, cfg.optim_wrapper)
        losses = model.train_step(data_fn(device), optim)
    total = sum(v.item() for k, v in losses.items() if 'loss' in k)
    assert all(torch.isfinite(v).all() for v in losses.values()), losses
    scaler = getattr(optim, 'loss_scaler', None)
    return (f'{type(optim).__name__}'
            f'{" scale %.0f" % scaler.get_scale() if scaler is not None else ""}, '
            f'loss {total:.3f}')


@check('Mask R-CNN AMP step (configs/inline_swin/mask-rcnn_inline-swin-t_fpn_amp-1x_coco.py)')
def check_mask_rcnn(device):
    from mmdet.testing import demo_mm_inputs

    def data(dev):
        d = demo_mm_inputs(batch_size=2, image_shapes=[(3, 640, 800), (3, 608, 832)],
                           num_items=[3, 2], num_classes=80, with_mask=True)
        return dict(inputs=[i for i in d['inputs']], data_samples=d['data_samples'])
    return amp_step('configs/inline_swin/mask-rcnn_inline-swin-t_fpn_amp-1x_coco.py', data,
                    device, 'mmdet')


@check('UperNet AMP step '
       '(configs/inline_swin/inline-swin-t-in1k-pre_upernet_8xb2-amp-160k_ade20k-512x512.py)')
def check_upernet(device):
    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample

    def data(dev):
        samples = []
        for _ in range(2):
            s = SegDataSample(metainfo=dict(img_shape=(512, 512), ori_shape=(512, 512),
                                            pad_shape=(512, 512)))
            s.gt_sem_seg = PixelData(data=torch.randint(0, 150, (1, 512, 512)))
            samples.append(s)
        return dict(inputs=[torch.randint(0, 255, (3, 512, 512), dtype=torch.uint8)
                            for _ in range(2)], data_samples=samples)
    return amp_step(
        'configs/inline_swin/inline-swin-t-in1k-pre_upernet_8xb2-amp-160k_ade20k-512x512.py',
        data, device, 'mmseg')



#: the ``amp-bf16`` Mask R-CNN of the tools check (check 3)
_MASK_RCNN_BF16 = 'configs/inline_swin/mask-rcnn_inline-swin-t_fpn_amp-bf16-1x_coco.py'


def _toy_coco_child(config, data, device, iters):
    """A child of ``config`` training ``iters`` iterations on the toy COCO set in ``data`` and
    testing on its val split: images at the shipped 1333x800 (CPU: 400x256), no ImageNet file,
    the heads sized for its classes; on CPU a plain fp32 optimiser (mmengine's AMP wrapper is
    CUDA-only)."""
    from mmengine.config import Config
    from inline_mm.datasets.toy.coco import DEFAULT_CLASSES
    scale = (1333, 800) if device != 'cpu' else (400, 256)
    optim = ''
    if device == 'cpu':
        wrapper = Config.fromfile(str(ROOT / config)).optim_wrapper.to_dict()
        optim = 'optim_wrapper = {!r}\n'.format(dict(
            {k: v for k, v in wrapper.items() if k not in ('dtype', 'loss_scale')},
            type='OptimWrapper', _delete_=True))
    meta = ("'img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor'")
    text = f"""_base_ = {str(ROOT / config)!r}
data_root = {str(data) + '/'!r}
classes = {DEFAULT_CLASSES!r}
model = dict(backbone=dict(init_cfg=None),
             roi_head=dict(bbox_head=dict(num_classes=len(classes)),
                           mask_head=dict(num_classes=len(classes))))
train_pipeline = [dict(type='LoadImageFromFile'),
                  dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
                  dict(type='Resize', scale={scale!r}, keep_ratio=True),
                  dict(type='RandomFlip', prob=0.5), dict(type='PackDetInputs')]
test_pipeline = [dict(type='LoadImageFromFile'),
                 dict(type='Resize', scale={scale!r}, keep_ratio=True),
                 dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
                 dict(type='PackDetInputs', meta_keys=({meta}))]
train_dataloader = dict(batch_size=2, num_workers=0, persistent_workers=False,
                        dataset=dict(data_root=data_root, metainfo=dict(classes=classes),
                                     pipeline=train_pipeline))
val_dataloader = dict(batch_size=1, num_workers=0, persistent_workers=False,
                      dataset=dict(data_root=data_root, metainfo=dict(classes=classes),
                                   pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file=data_root + 'annotations/instances_val2017.json')
test_evaluator = val_evaluator
train_cfg = dict(_delete_=True, type='IterBasedTrainLoop', max_iters={iters},
                 val_interval={iters})
param_scheduler = []
default_hooks = dict(logger=dict(interval=1),
                     checkpoint=dict(by_epoch=False, interval={iters}))
log_processor = dict(by_epoch=False, window_size=1)
{optim}"""
    path = data.parent / Path(config).name
    path.write_text(text)
    return path


def _tool(args, log):
    """``python tools/<args>`` from the repository root; its output, written to ``log``."""
    import subprocess
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), os.environ.get('PYTHONPATH', '')]).rstrip(os.pathsep))
    proc = subprocess.run([sys.executable, *map(str, args)], cwd=ROOT, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=1800)
    Path(log).write_text(proc.stdout)
    assert proc.returncode == 0, f'{args[0]} failed ({proc.returncode}):\n{proc.stdout[-3000:]}'
    return proc.stdout


@check(f'Mask R-CNN amp-bf16 through the tools ({_MASK_RCNN_BF16})')
def check_mask_rcnn_bf16_tools(device, out_dir):
    """4 iterations of the ``amp-bf16`` config with ``tools/train.py`` (AmpOptimWrapper, bf16
    autocast; compiled mmcv where installed, its RoIAlign bf16 through ``mmcv_ops_bf16``),
    losses finite, then ``tools/test.py`` on the checkpoint with ``test_cfg.fp16=True`` (fp16
    autocast on CUDA, bf16 on CPU): box and mask AP reported."""
    import json
    import re
    import shutil
    from inline_mm.datasets.toy.coco import make_coco_toy
    from inline_mm.patches import find
    work = Path(out_dir) / 'mask_rcnn_bf16'
    shutil.rmtree(work, ignore_errors=True)
    data = work / 'toy_coco'
    make_coco_toy(str(data), num_train=8, num_val=4, size=256, max_objects=3)
    config = _toy_coco_child(_MASK_RCNN_BF16, data, device, iters=4)
    _tool(['tools/train.py', config, '--work-dir', work / 'train'], work / 'train.log')
    losses = [json.loads(line)['loss'] for f in (work / 'train').glob('*/vis_data/scalars.json')
              for line in f.read_text().splitlines() if '"loss"' in line]
    assert len(losses) == 4 and all(math.isfinite(v) for v in losses), losses
    log = _tool(['tools/test.py', config, work / 'train' / 'iter_4.pth', '--work-dir',
                 work / 'test', '--cfg-options', 'test_cfg.fp16=True'], work / 'test.log')
    ap = {k: float(v) for k, v in re.findall(r'coco/(bbox_mAP|segm_mAP): (-?[\d.]+)', log)}
    assert set(ap) == {'bbox_mAP', 'segm_mAP'}, log[-2000:]
    row = find('mmcv_ops_bf16').needed()[0]
    return (f'mmcv._ext {_inline_mm_mmcv_hook.backend()} (mmcv_ops_bf16 '
            f'{"on" if row else "not needed"}); losses {", ".join(f"{v:.3f}" for v in losses)}; '
            f'test_cfg.fp16 box/mask mAP {ap["bbox_mAP"]:.3f}/{ap["segm_mAP"]:.3f}')

def _detection_batch(device):
    """Two COCO-like images (640x800 and 608x832 on the device; half each side on CPU,
    where the script only checks itself: still more encoder tokens than DINO's 900
    queries) with boxes and masks."""
    from mmdet.testing import demo_mm_inputs
    shapes = [(3, 640, 800), (3, 608, 832)] if device != 'cpu' else [(3, 320, 400),
                                                                     (3, 304, 416)]
    d = demo_mm_inputs(batch_size=2, image_shapes=shapes, num_items=[3, 2], num_classes=80,
                       with_mask=True)
    return dict(inputs=list(d['inputs']), data_samples=d['data_samples'])


@check("stand-in focal loss and deformable attention on device vs CPU's PyTorch paths")
def check_head_ops(device):
    """mmcv's CUDA-branch calls on ``device`` (answered by the stand-in without compiled
    mmcv) against the PyTorch paths mmdet and mmcv take on CPU; with ``--device cpu`` the
    CUDA-branch calls run on CPU tensors (as tests/test_mmcv_fallback.py makes them)."""
    import torch.nn.functional as F
    from mmcv.ops import MultiScaleDeformableAttention
    from mmcv.ops.multi_scale_deform_attn import (MultiScaleDeformableAttnFunction,
                                                  multi_scale_deformable_attn_pytorch)
    from mmdet.models.losses import FocalLoss
    from mmdet.models.losses.focal_loss import py_sigmoid_focal_loss, sigmoid_focal_loss
    gen = torch.Generator().manual_seed(0)
    lines = []
    # focal loss: mmdet's CUDA branch (class indices) against its CPU branch (one-hot)
    logits = torch.randn(4000, 80, generator=gen) * 4
    labels = torch.randint(0, 81, (4000,), generator=gen)
    weight = torch.rand(4000, generator=gen)
    outs = {}
    for side, dev in (('ref', 'cpu'), ('dev', device)):
        x = logits.to(dev).requires_grad_()
        if side == 'ref':
            loss = py_sigmoid_focal_loss(x, F.one_hot(labels, 81)[:, :80], weight, 2., .25,
                                         'mean', 123.)
        else:
            loss = sigmoid_focal_loss(x, labels.to(dev), weight.to(dev), 2., .25, 'mean', 123.)
        loss.backward()
        outs[side] = (loss.detach(), x.grad)
    fwd, bwd = rel_err(outs['dev'][0], outs['ref'][0]), rel_err(outs['dev'][1], outs['ref'][1])
    assert fwd < 1e-5 and bwd < 1e-5, ('sigmoid_focal_loss', fwd, bwd)
    lines.append(f'sigmoid_focal_loss fwd {fwd:.1e} bwd {bwd:.1e}')
    if device != 'cpu':     # the module as RetinaNet and DINO hold it, branch by device
        module = {dev: FocalLoss(use_sigmoid=True, gamma=2., alpha=.25)(
            logits.to(dev), labels.to(dev), avg_factor=50.) for dev in ('cpu', device)}
        assert rel_err(module[device], module['cpu']) < 1e-5, 'FocalLoss module'
    # deformable attention: mmcv's CUDA-branch function against its PyTorch function
    shapes = torch.tensor([[64, 96], [32, 48], [16, 24], [8, 12]])
    starts = torch.cat([shapes.new_zeros(1), shapes.prod(1).cumsum(0)[:-1]])
    value = torch.randn(2, int(shapes.prod(1).sum()), 8, 32, generator=gen)
    locs = torch.rand(2, 300, 8, 4, 4, 2, generator=gen) * 1.2 - 0.1
    attw = torch.rand(2, 300, 8, 16, generator=gen).softmax(-1).view(2, 300, 8, 4, 4)
    outs = {}
    for side, dev in (('ref', 'cpu'), ('dev', device)):
        ins = [t.to(dev).requires_grad_() for t in (value, locs, attw)]
        if side == 'ref':
            out = multi_scale_deformable_attn_pytorch(ins[0], shapes, *ins[1:])
        else:
            out = MultiScaleDeformableAttnFunction.apply(ins[0], shapes.to(dev),
                                                         starts.to(dev), *ins[1:], 64)
        out.backward(torch.ones_like(out))
        outs[side] = [out.detach()] + [t.grad for t in ins]
    errs = [rel_err(a, b) for a, b in zip(outs['dev'], outs['ref'])]
    assert max(errs) < 1e-4, ('ms_deform_attn', errs)
    lines.append('ms_deform_attn fwd {:.1e}, grads value/loc/weight {:.1e}/{:.1e}/{:.1e}'.format(
        *errs))
    if device != 'cpu':     # the module, same weights: its CUDA branch against its CPU one
        torch.manual_seed(0)
        attn = MultiScaleDeformableAttention(embed_dims=256, num_levels=4, batch_first=True)
        query = torch.randn(2, 300, 256, generator=gen)
        feat = torch.randn(2, int(shapes.prod(1).sum()), 256, generator=gen)
        ref_points = torch.rand(2, 300, 4, 2, generator=gen)
        res = {}
        for dev in ('cpu', device):
            res[dev] = attn.to(dev)(query.to(dev), value=feat.to(dev),
                                    reference_points=ref_points.to(dev),
                                    spatial_shapes=shapes.to(dev),
                                    level_start_index=starts.to(dev))
        err = rel_err(res[device], res['cpu'])
        assert err < 1e-4, ('MultiScaleDeformableAttention', err)
        lines.append(f'MultiScaleDeformableAttention module {err:.1e}')
    return '; '.join(lines)


def _cpu_sized(cfg):
    """The script's CPU dry run: Mask2Former's batch padding at 256 instead of 1024."""
    for augment in cfg.model.data_preprocessor.get('batch_augments') or []:
        augment.size = (256, 256)


def _recorded_step(config, device, scope, data_fn):
    """One training iteration of ``config`` with the mmcv._ext functions it calls."""
    calls = Path(os.environ.get('OUT', '/tmp')) / f'mmcv_ext_calls_{os.getpid()}.txt'
    calls.unlink(missing_ok=True)
    os.environ['INLINE_MM_RECORD_OPS'] = str(calls)
    try:
        line = amp_step(config, data_fn, device, scope,
                        adjust=_cpu_sized if device == 'cpu' else None)
    finally:
        os.environ.pop('INLINE_MM_RECORD_OPS')
    called = sorted(set(calls.read_text().split())) if calls.exists() else []
    return line, called


def _head_step(config, must_call):
    def run(device):
        line, called = _recorded_step(config, device, 'mmdet', _detection_batch)
        if device != 'cpu' and _inline_mm_mmcv_hook.backend() == 'fallback':
            missing = set(must_call) - set(called)
            assert not missing, f'the CUDA branch did not reach {sorted(missing)}: {called}'
        return f'{line}; mmcv._ext called: {", ".join(called) or "nothing"}'
    return run


FOCAL = ('sigmoid_focal_loss_forward', 'sigmoid_focal_loss_backward')
DEFORM = ('ms_deform_attn_forward', 'ms_deform_attn_backward')
_RETINANET = 'configs/inline_swin/retinanet_inline-swin-t_fpn_1x_coco.py'
check_retinanet = check(f'RetinaNet step ({_RETINANET})')(_head_step(_RETINANET, FOCAL))
check_dino = check('DINO step (configs/inline_swin/dino-4scale_inline-swin-t_8xb2-12e_coco.py)')(
    _head_step('configs/inline_swin/dino-4scale_inline-swin-t_8xb2-12e_coco.py', FOCAL + DEFORM))
check_mask2former = check(
    'Mask2Former step (configs/inline_swin/mask2former_inline-swin-t_8xb2-lsj-50e_coco.py)')(
    _head_step('configs/inline_swin/mask2former_inline-swin-t_8xb2-lsj-50e_coco.py', DEFORM))


@check('python -m benchmarks --quick')
def check_benchmark(device, out_dir):
    argv = sys.argv
    sys.argv = ['benchmark.py', '--quick', '--device', device, '--out-dir', str(out_dir)]
    try:
        runpy.run_path(str(ROOT / 'benchmarks' / '__main__.py'), run_name='__main__')
    except SystemExit as e:
        if e.code not in (0, None):
            raise RuntimeError(f'benchmark exited with {e.code}')
    finally:
        sys.argv = argv
    return f'tables above; CSV in {out_dir}'


@check('torch.compile of every family (smoke) over a stream of sizes (benchmarks.compile)')
def check_compile(device, out_dir, backend='inductor'):
    from benchmarks.compile import run
    from inline_mm.models import FAMILIES
    lines = []
    for name in FAMILIES:
        rows = run(name, 'tiny', ['64x96', '72x80', '88x64'], None, backend, 2, True,
                   device, False)
        worst = max(float(r['max_abs_err']) for r in rows)
        if worst > 1e-4:
            raise RuntimeError(f'{name}: compiled output differs from eager by {worst:.1e}')
        lines.append(f'{name}: ' + ', '.join(
            f"{r['size']} {r['compile_s']} s ({r['graphs']} graph(s), x{r['speedup']})"
            for r in rows))
    return '; '.join(lines)


@check('tools/benchmark.py figures on the device: padding cost, the attention vs its linears')
def check_floor_and_padding(device, out_dir):
    from types import SimpleNamespace

    from benchmarks import floor, padding
    from inline_mm.models import FAMILIES
    dev = torch.device(device)
    out_dir.mkdir(parents=True, exist_ok=True)
    quick = device == 'cpu'                     # the CPU dry run checks the code, not figures
    args = SimpleNamespace(models=list(FAMILIES), modes=['inference', 'training'],
                           sizes=[(64, 96)] if quick else [(800, 1333)], conditions=['padded'],
                           batch=2, warmup=1, repeats=2 if quick else 5, quick=quick)
    results = padding.run(args, dev)
    print(padding.padding_table(results))
    rows, prof = floor.run_floor(floor.QUICK_CASES if quick else floor.FULL_CASES,
                                 2 if quick else 7, 1 if quick else 3, dev)
    print(floor.floor_table(rows))
    print(floor.profile_table(prof))
    floor.write_floor_csv(rows, prof, out_dir / 'floor.csv', out_dir / 'floor_profile.csv')
    worst = max(r.median / p.median for r in results for p in results
                if r.variant == 'aware' and p.variant == 'plain'
                and (r.family, r.mode) == (p.family, p.mode))
    return f'padded aware/plain at most {worst:.3f}; floor tables above, CSV in {out_dir}'


def _timed(fn, device, repeats=5):
    """Median seconds of ``fn()`` (CUDA events on CUDA, after a warm-up run)."""
    import statistics
    fn()
    times = []
    for _ in range(repeats):
        if device == 'cuda':
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


@check('batched path vs per-sample on device: padded B=2/8, no sync, ops, times')
def check_batched(device):
    from benchmarks.launches import count, make_batch
    from inline_mm.models import FAMILIES
    size = (512, 512) if device == 'cuda' else (128, 160)
    lines = []
    for family in FAMILIES.values():
        torch.manual_seed(0)
        kwargs = dict(arch='tiny') if device == 'cuda' else dict(family.smoke)
        model = family.cls(**{**kwargs, 'drop_path_rate': 0.}).to(device).train()
        line = [family.name]
        for b in (2, 8):
            x = make_batch(size, b, padded=True).to(device)
            outs, weights = {}, None
            for path in (True, False):
                model.batched = path
                model.zero_grad()
                xi = x.clone().requires_grad_()
                y = model(xi)
                if weights is None:      # a fixed random linear loss: gradients of order 1
                    gen = torch.Generator().manual_seed(1)
                    weights = [torch.randn(o.shape, generator=gen).to(device) for o in y]
                sum((o.float() * w).sum() for o, w in zip(y, weights)).backward()
                grads = torch.cat([p.grad.flatten() for p in model.parameters()
                                   if p.grad is not None])
                outs[path] = ([o.detach() for o in y], grads, xi.grad)
            fwd = max(rel_err(a, r) for a, r in zip(outs[True][0], outs[False][0]))
            pg, xg = rel_err(outs[True][1], outs[False][1]), rel_err(outs[True][2], outs[False][2])
            assert fwd < 1e-4 and pg < 1e-3 and xg < 1e-3, (family.name, b, fwd, pg, xg)
            model.batched = True
            if device == 'cuda':
                torch.cuda.synchronize()
                torch.cuda.set_sync_debug_mode('error')
                try:
                    with torch.no_grad():
                        model(x)
                finally:
                    torch.cuda.set_sync_debug_mode('default')
            ops = {}
            times = {}
            for path, name in ((True, 'batched'), (False, 'per-sample')):
                model.batched = path
                model.eval()
                ops[name] = count(model, x)
                model.train()

                def step():
                    model.zero_grad()
                    sum((o.float() ** 2).mean() for o in model(x)).backward()
                times[name] = _timed(step, device)
            line.append(f'B={b} err {fwd:.1e}/{pg:.1e}; ops {ops["batched"][0]} vs '
                        f'{ops["per-sample"][0]}, reads {ops["batched"][1]} vs '
                        f'{ops["per-sample"][1]}; fwd+bwd {times["batched"] * 1e3:.1f} ms vs '
                        f'{times["per-sample"] * 1e3:.1f} ms')
        lines.append(' '.join(line))
    return '\n     ' + '\n     '.join(lines)


def _tensorrt_outputs(onnx_path, canvas, sizes, out_dir):
    """Build an fp16 TensorRT engine of an exported file (batch 1 to 8; the recipe of
    docs/deploy.md with the Python API) and run it on a padded batch: outputs by name,
    and the build and run times."""
    import tensorrt as trt
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(Path(onnx_path).read_bytes()):
        raise RuntimeError('TensorRT cannot parse the file: ' + '; '.join(
            str(parser.get_error(i)) for i in range(parser.num_errors)))
    config = builder.create_builder_config()
    if hasattr(trt.BuilderFlag, 'FP16'):
        config.set_flag(trt.BuilderFlag.FP16)
    h, w = canvas.shape[2:]
    profile = builder.create_optimization_profile()
    profile.set_shape('input', (1, 3, h, w), (len(canvas), 3, h, w), (8, 3, h, w))
    profile.set_shape('sizes', (1, 2), (len(canvas), 2), (8, 2))
    config.add_optimization_profile(profile)
    start = time.perf_counter()
    plan = builder.build_serialized_network(network, config)
    if plan is None:
        raise RuntimeError('TensorRT could not build the engine (log above)')
    build_s = time.perf_counter() - start
    (out_dir / 'toy_mask_rcnn.plan').write_bytes(bytes(plan))
    engine = trt.Runtime(logger).deserialize_cuda_engine(plan)
    context = engine.create_execution_context()
    feeds = {'input': torch.from_numpy(canvas).cuda(), 'sizes': torch.from_numpy(sizes).cuda()}
    dtypes = {trt.float32: torch.float32, trt.float16: torch.float16, trt.int32: torch.int32,
              trt.int64: torch.int64, trt.bool: torch.bool, trt.uint8: torch.uint8}
    allocator = _output_allocator(trt)
    outputs = {}
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        if engine.get_tensor_mode(name) == trt.TensorIOMode.OUTPUT:
            shape = tuple(context.get_tensor_shape(name))
            if min(shape) < 0:        # known when it runs: the masks of the detections kept
                context.set_output_allocator(name, allocator)
                continue
            outputs[name] = torch.empty(shape, dtype=dtypes[engine.get_tensor_dtype(name)],
                                        device='cuda')
            context.set_tensor_address(name, outputs[name].data_ptr())
    stream = torch.cuda.current_stream()

    def run():
        context.execute_async_v3(stream.cuda_stream)

    run_s = _timed(run, 'cuda')
    stream.synchronize()
    for name, shape in allocator.shapes.items():
        dtype = dtypes[engine.get_tensor_dtype(name)]
        count = math.prod(shape)
        outputs[name] = allocator.buffers[name].view(dtype)[:count].view(shape)

    def host(name, t):
        if name == 'masks':
            return t.float().cpu().numpy()
        return (t.float() if name == 'dets' else t.long()).cpu().numpy()
    return {k: host(k, v) for k, v in outputs.items()}, build_s, run_s


def _output_allocator(trt):
    """A TensorRT output allocator: device buffers for the outputs whose shapes the engine
    knows only when it runs (``masks``: one row per detection kept), and those shapes."""
    class Allocator(trt.IOutputAllocator):
        def __init__(self):
            trt.IOutputAllocator.__init__(self)
            self.buffers, self.shapes = {}, {}

        def reallocate_output(self, name, memory, size, alignment):
            buf = self.buffers.get(name)
            if buf is None or buf.numel() < size:
                # (whole elements of 8 bytes, at least one: any dtype's view fits)
                buf = torch.empty((int(size) // 8 + 1) * 8, dtype=torch.uint8, device='cuda')
                self.buffers[name] = buf
            return buf.data_ptr()

        def reallocate_output_async(self, name, memory, size, alignment, stream):
            return self.reallocate_output(name, memory, size, alignment)

        def notify_shape(self, name, shape):
            self.shapes[name] = tuple(shape)
    return Allocator()


@check('TensorRT (fp16) engine of an exported Mask R-CNN against ONNX Runtime')
def check_tensorrt(device, out_dir):
    """The toy Mask R-CNN (inline_mm.deploy.toy, trained on the device in seconds) exported
    to ONNX on the CPU, then built into a TensorRT fp16 engine and run on a padded batch of
    its images: its detections against ONNX Runtime's (CPU, fp32). ``--device cpu``
    checks the script: 20 training iterations, and the PyTorch graph in the engine's
    place (no TensorRT)."""
    from mmengine.registry import DefaultScope
    from mmengine.runner import Runner

    from inline_mm.apis import init_model
    from inline_mm.deploy import OnnxModel, build_graph, export_graph
    from inline_mm.deploy.evaluate import compare_outputs, run_graph
    from inline_mm.deploy.toy import train_toy
    out_dir = Path(out_dir)
    work = out_dir / 'tensorrt'
    work.mkdir(parents=True, exist_ok=True)
    config, checkpoint, metrics = train_toy('mask_rcnn', str(work),
                                            iters=20 if device == 'cpu' else None)
    model = init_model(config, checkpoint)
    cfg = model.cfg
    graph = build_graph(model, (96, 128))
    onnx_path = export_graph(graph, str(work / 'toy_mask_rcnn.onnx'))
    runtime = OnnxModel(onnx_path)
    with DefaultScope.overwrite_default_scope('mmdet'):
        batch = next(iter(Runner.build_dataloader(cfg.test_dataloader)))
    # the toy images cut to other sizes, multiples of 32 (docs/deploy.md, limits: ties)
    cuts = [(96, 96), (64, 64), (64, 96), (96, 32)]
    canvas, sizes = runtime.pad([img[:, :h, :w] for img, (h, w) in zip(batch['inputs'], cuts)])
    reference = runtime(canvas, sizes)
    if device == 'cpu':
        other, note = run_graph(graph, canvas, sizes), 'cpu dry run: PyTorch graph, no engine'
    else:
        other, build_s, run_s = _tensorrt_outputs(onnx_path, canvas, sizes, work)
        note = f'engine built in {build_s:.0f} s, {run_s * 1e3:.1f} ms per batch of {len(canvas)}'
    summary = compare_outputs(reference, other, sizes, runtime.task,
                              names=('onnxruntime', 'tensorrt'),
                              mask_thr_binary=runtime.mask_thr_binary)
    if device != 'cpu':     # (the dry run's 20-iteration model proves nothing about figures)
        found = summary['detections_onnxruntime']
        assert found and summary['matched'] >= 0.9 * found, summary
        assert summary['max_box_diff_px'] <= 2 and summary['max_score_diff'] <= 0.02, summary
        assert summary['min_mask_iou'] >= 0.9, summary
    return (f"toy box AP {metrics.get('coco/bbox_mAP')}; {note}; {summary['matched']} of "
            f"{summary['detections_onnxruntime']} detections matched, box diff "
            f"{summary['max_box_diff_px']:.2f} px, score {summary['max_score_diff']:.1e}, "
            f"mask IoU >= {summary['min_mask_iou']:.3f}")


@check('memory count (inline_mm.analysis.memory) against the allocator\'s peak of a step: '
       'InLine-Swin-T UperNet, batch 2, 512x512 (CPU: 128x128, fp32)')
def check_memory(device):
    from benchmarks import memory
    lines = []
    for precision in ('fp32', 'fp16') if device == 'cuda' else ('fp32',):
        options = None if device == 'cuda' else {'model.data_preprocessor.size': (128, 128)}
        for row in memory.check(cfg_options=options, rounds=1, device=device,
                                precision=precision):
            lines.append(f"{precision} with_cp {row['with_cp']}: counted {row['counted_gib']} "
                         f"GiB, allocated {row['measured_gib']} GiB (ratio {row['ratio']}), "
                         f"step {row['step_s']} s ({row['time_ratio']} of with_cp off)")
            # the count leaves out cuDNN workspaces and allocator rounding: below, not above
            assert 0.7 <= row['ratio'] <= 1.1, lines[-1]
    return '\n     ' + '\n     '.join(lines)


# --------------------------------------------------------------------------- precision
@check('InLine vs Softmax pairs under fp16 and bf16 autocast (benchmarks.precision.PAIRS)')
def check_precision(device, out_dir):
    """Each pair of ``benchmarks.precision`` (InLine model and its counterparts) on the device
    under fp16 and bf16 autocast, forward and forward + backward, at 800x1280 and 1024x2048:
    CUDA-event medians and counterpart / InLine (above 1: InLine faster). The CPU dry run:
    the quick models at 64x96 under CPU bf16 autocast."""
    from benchmarks.measure import write_dict_rows
    from benchmarks.precision import PAIRS
    quick = device == 'cpu'
    dtypes = {'bf16': torch.bfloat16} if quick else {'fp16': torch.float16,
                                                      'bf16': torch.bfloat16}
    sizes = [(64, 96)] if quick else [(800, 1280), (1024, 2048)]
    rows, slower = [], []
    for inline, (build, others) in PAIRS.items():
        torch.manual_seed(0)
        models = {inline: build(quick)}
        models.update({name: b(quick) for name, b, _ in others})
        models = {k: m.to(device) for k, m in models.items()}
        for (h, w) in sizes:
            x = torch.randn(1, 3, h, w, device=device)
            for label, dtype in dtypes.items():
                for mode in ('forward', 'forward+backward'):
                    times = {}
                    for name, model in models.items():
                        def step(model=model):
                            model.train(mode != 'forward')
                            with torch.autocast(device, dtype):
                                if mode == 'forward':
                                    with torch.no_grad():
                                        return model(x)
                                outs = model(x)
                            sum(o.float().square().mean() for o in outs).backward()
                        try:
                            times[name] = _timed(step, device, 2 if quick else 5)
                        except torch.cuda.OutOfMemoryError:
                            times[name] = None
                            torch.cuda.empty_cache()
                    for name, t in times.items():
                        ratio = (None if name == inline or t is None or times[inline] is None
                                 else t / times[inline])
                        rows.append(dict(size=f'{h}x{w}', dtype=label, mode=mode, model=name,
                                         seconds='OOM' if t is None else t,
                                         vs_inline=ratio if ratio is not None else ''))
                        if ratio is not None and ratio < 1:
                            slower.append(f'{inline} vs {name} {label} {mode} {h}x{w}: '
                                          f'{ratio:.2f}x')
        del models
        if device == 'cuda':
            torch.cuda.empty_cache()
    for r in rows:
        print(f"     {r['size']:>9} {r['dtype']} {r['mode']:>16} {r['model']:>16}: "
              + (r['seconds'] if r['seconds'] == 'OOM' else f"{r['seconds'] * 1e3:8.1f} ms")
              + (f"  counterpart/InLine {r['vs_inline']:.2f}x" if r['vs_inline'] != '' else ''))
    out_dir.mkdir(parents=True, exist_ok=True)
    write_dict_rows(rows, out_dir / 'precision_cuda.csv')
    return ('every InLine model faster than its counterparts' if not slower else
            'InLine slower in: ' + '; '.join(slower)) + f'; CSV in {out_dir}'


#: --only key -> (check, whether it takes the output folder), in the order they run
CHECKS = {
    'batched': (check_batched, False),
    'ops': (check_ops, False),
    'backbones': (check_backbones, False),
    'switches': (check_switches, False),
    'mask_rcnn': (check_mask_rcnn, False),
    'upernet': (check_upernet, False),
    'mask_rcnn_bf16': (check_mask_rcnn_bf16_tools, True),
    'benchmark': (check_benchmark, True),
    'compile': (check_compile, True),
    'floor': (check_floor_and_padding, True),
    'head_ops': (check_head_ops, False),
    'retinanet': (check_retinanet, False),
    'dino': (check_dino, False),
    'mask2former': (check_mask2former, False),
    'tensorrt': (check_tensorrt, True),
    'memory': (check_memory, False),
    'precision': (check_precision, True),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--device', default='cuda', choices=['cuda', 'cpu'])
    parser.add_argument('--out-dir', default=os.environ.get('OUT', 'work_dirs/cuda_check'))
    parser.add_argument('--only', default=None,
                        help='comma-separated checks to run (default: all); --list names them')
    parser.add_argument('--list', action='store_true', help='print the check keys and exit')
    args = parser.parse_args()
    if args.list:
        print('\n'.join(CHECKS))
        return
    keys = list(CHECKS) if args.only is None else [k.strip() for k in args.only.split(',')]
    unknown = [k for k in keys if k not in CHECKS]
    if unknown:
        parser.error(f'--only: unknown check(s) {", ".join(unknown)}; choose among '
                     f'{", ".join(CHECKS)}')
    if args.device == 'cuda' and not torch.cuda.is_available():
        sys.exit('no CUDA device visible to torch')
    print(f'torch {torch.__version__}, device: '
          f'{torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"}; '
          f'mmcv._ext: {_inline_mm_mmcv_hook.backend()}', flush=True)
    start = time.perf_counter()
    for key in keys:
        fn, takes_out_dir = CHECKS[key]
        fn(args.device, Path(args.out_dir)) if takes_out_dir else fn(args.device)
    failed = [n for n, ok in RESULTS if not ok]
    print(f'{len(RESULTS) - len(failed)} passed, {len(failed)} failed '
          f'({time.perf_counter() - start:.0f} s)')
    sys.exit(1 if failed else 0)


if __name__ == '__main__':
    main()
