#!/usr/bin/env python
"""Where an exported model spends its time, against PyTorch eager (docs/dev/performance.md,
"Deployed detectors: the profile"): one case of ``benchmarks.deploy_whole``, one profiled run
of each after a warm-up, at ``--threads`` threads (default 1).

    python -m benchmarks.profile_deploy_whole mask_rcnn_800x1344 --onnx-dir work_dirs/deploy_onnx
    python -m benchmarks.profile_deploy_whole mask_rcnn_800x1344 --graph filled
    python -m benchmarks.profile_deploy_whole retinanet_512x512 --threads 2

ONNX Runtime: its own profiler (``enable_profiling``) on the file (``--graph``: the padded
graph, default, or the one for images that fill the canvas), kernel time summed by the
graph's top-level module (the node names' first part) and by op; the mask paste after it
(``OnnxModel.results``) timed apart. PyTorch: ``model.test_step`` with forward hooks timing
the model's parts it has of backbone, neck, RPN head, RoI extractors, box and mask heads,
decode and auxiliary heads (the rest: pre- and post-processing, the paste). The file is
exported into ``--onnx-dir`` unless there.
"""
import argparse
import collections
import json
import tempfile
import time
from pathlib import Path

import torch

from benchmarks import deploy_whole


def _ort_profile(path, data, prefix, threads):
    import onnxruntime as ort

    from inline_mm.deploy import OnnxModel
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.enable_profiling, options.profile_file_prefix = True, prefix
    session = ort.InferenceSession(path, options, providers=['CPUExecutionProvider'])
    runtime = OnnxModel(path, threads=threads)
    canvas, sizes = runtime.pad([data['inputs'][0]])
    feed = {'input': canvas, 'sizes': sizes}
    session.run(None, feed)
    start = time.perf_counter()
    out = session.run(None, feed)
    run_s = time.perf_counter() - start
    outputs = dict(zip([o.name for o in session.get_outputs()], out))
    start = time.perf_counter()
    runtime.results(outputs, sizes)
    paste_s = time.perf_counter() - start
    events = json.load(open(session.end_profiling()))
    nodes = [e for e in events if e.get('cat') == 'Node' and e['name'].endswith('_kernel_time')]
    nodes = nodes[len(nodes) // 2:]                      # the second run's
    by_op, by_module = collections.Counter(), collections.Counter()
    for e in nodes:
        by_op[e['args'].get('op_name')] += e['dur'] / 1e6
        name = e['name'].replace('fused ', '').lstrip('/')
        by_module[name.split('/')[0] if '/' in name else '(post-processing)'] += e['dur'] / 1e6
    return run_s, paste_s, by_module, by_op


def _parts(model):
    """The model's parts that are timed apart, by name."""
    parts = {k: getattr(model, k) for k in ('backbone', 'neck', 'rpn_head', 'bbox_head',
                                            'decode_head', 'auxiliary_head')
             if isinstance(getattr(model, k, None), torch.nn.Module)}
    roi = getattr(model, 'roi_head', None)
    for k in ('bbox_roi_extractor', 'bbox_head', 'mask_roi_extractor', 'mask_head'):
        if isinstance(getattr(roi, k, None), torch.nn.Module):
            parts[k if k not in parts else f'roi_{k}'] = getattr(roi, k)
    return parts


def _eager_profile(model, data, threads):
    torch.set_num_threads(threads)
    parts = _parts(model)
    spent, started = collections.Counter(), {}
    handles = []
    for key, module in parts.items():
        handles.append(module.register_forward_pre_hook(
            lambda m, a, k=key: started.__setitem__(k, time.perf_counter())))
        handles.append(module.register_forward_hook(
            lambda m, a, o, k=key: spent.update({k: time.perf_counter() - started[k]})))
    with torch.no_grad():
        model.test_step(data)
        spent.clear()
        start = time.perf_counter()
        model.test_step(data)
        total = time.perf_counter() - start
    for h in handles:
        h.remove()
    return total, spent


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('case', choices=list(deploy_whole.CASES))
    p.add_argument('--threads', type=int, default=1)
    p.add_argument('--onnx-dir', type=Path, default=None)
    p.add_argument('--demo-checkpoint', default=None)
    p.add_argument('--graph', choices=deploy_whole.GRAPHS, default='padded',
                   help="the exported graph: 'padded' (default) or 'filled' (no padding masks)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        onnx_dir = args.onnx_dir or Path(tmp)
        onnx_dir.mkdir(parents=True, exist_ok=True)
        model, _, data, paths, _ = deploy_whole.build_case(
            args.case, Path(tmp), deploy_whole.demo_checkpoint(args.demo_checkpoint), onnx_dir,
            [args.graph])
        run_s, paste_s, by_module, by_op = _ort_profile(paths[args.graph], data,
                                                          str(Path(tmp) / 'ort'), args.threads)
    total = sum(by_op.values())
    t = f'{args.threads} thread{"s" if args.threads > 1 else ""}'
    print(f'ONNX Runtime ({args.graph} graph), {t}: run {run_s:.2f} s (kernels {total:.2f} s), '
          f'paste {paste_s:.2f} s')
    for name, s in by_module.most_common(8):
        print(f'  {name:32s} {s:6.2f} s {100 * s / total:5.1f}%')
    for name, s in by_op.most_common(12):
        print(f'  op {name:29s} {s:6.2f} s {100 * s / total:5.1f}%')
    eager, spent = _eager_profile(model, data, args.threads)
    print(f'PyTorch, {t}: test_step {eager:.2f} s')
    for name, s in spent.items():
        print(f'  {name:32s} {s:6.2f} s {100 * s / eager:5.1f}%')
    print(f'  {"rest (pre/post-processing, paste)":32s} {eager - sum(spent.values()):6.2f} s')


if __name__ == '__main__':
    main()
