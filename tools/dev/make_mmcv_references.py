"""Record compiled mmcv's outputs for the ops that inline_mm's torchvision fallback replaces.

Run it once in an environment with a *compiled* mmcv 2.1.x (``INLINE_MM_MMCV=full make setup``,
or any venv where ``import mmcv._ext`` loads mmcv's own extension)::

    .venv/bin/python tools/dev/make_mmcv_references.py tests/data/mmcv_ops_reference.pth

or, in minutes instead of a full mmcv build, compile just mmcv's own NMS and RoIAlign CPU
kernels from the mmcv 2.1.0 source distribution (the same C++ files and the same Python
wrappers; needs a C++ compiler)::

    pip download --no-deps --no-binary :all: mmcv==2.1.0 && tar xzf mmcv-2.1.0.tar.gz
    .venv/bin/python tools/dev/make_mmcv_references.py --mmcv-source mmcv-2.1.0 OUT.pth

The file holds every input and compiled mmcv's output, so ``tests/test_mmcv_fallback.py`` can
check the fallback everywhere without a compiler.  Not a CI step.
"""
import argparse
import sys

import torch


def nms_cases(gen: torch.Generator) -> list:
    def boxes(n, scale=100.):
        xy = torch.rand(n, 2, generator=gen) * scale
        wh = torch.rand(n, 2, generator=gen) * scale / 4 + 0.5
        return torch.cat([xy, xy + wh], 1)

    cases = []
    for n, iou in ((300, 0.5), (300, 0.7), (1000, 0.3)):
        cases.append(dict(name=f'random_{n}_iou{iou}', boxes=boxes(n),
                          scores=torch.rand(n, generator=gen), iou=iou))
    # Exactly equal scores: mmcv sorts them unstably, torchvision stably.
    cases.append(dict(name='ties', boxes=boxes(400),
                      scores=torch.randint(0, 8, (400,), generator=gen).float() / 8, iou=0.5))
    cases.append(dict(name='empty', boxes=torch.zeros(0, 4), scores=torch.zeros(0), iou=0.5))
    cases.append(dict(name='one', boxes=boxes(1), scores=torch.rand(1, generator=gen), iou=0.5))
    return cases


def batched_cases(gen: torch.Generator) -> list:
    cases = []
    for n, classes, split_thr in ((500, 5, 10000), (600, 4, 100)):  # 100: per-class branch
        xy = torch.rand(n, 2, generator=gen) * 200
        b = torch.cat([xy, xy + torch.rand(n, 2, generator=gen) * 60 + 1], 1)
        cases.append(dict(name=f'batched_{n}_{classes}cls_split{split_thr}', boxes=b,
                          scores=torch.rand(n, generator=gen),
                          idxs=torch.randint(0, classes, (n,), generator=gen),
                          nms_cfg=dict(type='nms', iou_threshold=0.5, split_thr=split_thr)))
    return cases


def roi_align_cases(gen: torch.Generator) -> list:
    feats = torch.randn(2, 8, 20, 24, generator=gen)
    rois = torch.tensor([
        [0, 2.0, 3.0, 60.0, 50.0],      # inside
        [1, -10.0, -6.0, 30.0, 20.0],   # partly outside (top-left)
        [0, 80.0, 60.0, 110.0, 95.0],   # partly outside (bottom-right)
        [1, 40.0, 40.0, 40.5, 41.0],    # smaller than one cell
        [0, 0.0, 0.0, 95.9, 79.9],      # the whole map
    ])
    cases = []
    for out_size in ((7, 7), (14, 14)):
        for sampling_ratio in (0, 2):
            for aligned in (True, False):
                cases.append(dict(
                    name=(f'roi_{out_size[0]}_s{sampling_ratio}_'
                          f'{"aligned" if aligned else "legacy"}'),
                    feats=feats, rois=rois, output_size=out_size, spatial_scale=0.25,
                    sampling_ratio=sampling_ratio, aligned=aligned,
                    grad_output=torch.randn(len(rois), 8, *out_size, generator=gen)))
    cases.append(dict(name='roi_empty', feats=feats, rois=torch.zeros(0, 5), output_size=(7, 7),
                      spatial_scale=0.25, sampling_ratio=0, aligned=True,
                      grad_output=torch.zeros(0, 8, 7, 7)))
    return cases


def run_nms(case):
    from mmcv.ops import nms
    _, keep = nms(case['boxes'], case['scores'], case['iou'])
    return keep


def run_batched(case):
    from mmcv.ops import batched_nms
    dets, keep = batched_nms(case['boxes'], case['scores'], case['idxs'], dict(case['nms_cfg']))
    return keep


def run_roi_align(case):
    from mmcv.ops import roi_align
    feats = case['feats'].clone().requires_grad_()
    out = roi_align(feats, case['rois'], case['output_size'], case['spatial_scale'],
                    case['sampling_ratio'], 'avg', case['aligned'])
    if out.numel():
        out.backward(case['grad_output'])
    grad = feats.grad if feats.grad is not None else torch.zeros_like(feats)
    return out.detach(), grad


PYBIND = r"""
#include <torch/extension.h>
using at::Tensor;
Tensor nms(Tensor boxes, Tensor scores, float iou_threshold, int offset);
void roi_align_forward(Tensor input, Tensor rois, Tensor output, Tensor argmax_y,
                       Tensor argmax_x, int aligned_height, int aligned_width,
                       float spatial_scale, int sampling_ratio, int pool_mode, bool aligned);
void roi_align_backward(Tensor grad_output, Tensor rois, Tensor argmax_y, Tensor argmax_x,
                        Tensor grad_input, int aligned_height, int aligned_width,
                        float spatial_scale, int sampling_ratio, int pool_mode, bool aligned);
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("nms", &nms, py::arg("boxes"), py::arg("scores"), py::arg("iou_threshold"),
        py::arg("offset"));
  m.def("roi_align_forward", &roi_align_forward, py::arg("input"), py::arg("rois"),
        py::arg("output"), py::arg("argmax_y"), py::arg("argmax_x"), py::arg("aligned_height"),
        py::arg("aligned_width"), py::arg("spatial_scale"), py::arg("sampling_ratio"),
        py::arg("pool_mode"), py::arg("aligned"));
  m.def("roi_align_backward", &roi_align_backward, py::arg("grad_output"), py::arg("rois"),
        py::arg("argmax_y"), py::arg("argmax_x"), py::arg("grad_input"),
        py::arg("aligned_height"), py::arg("aligned_width"), py::arg("spatial_scale"),
        py::arg("sampling_ratio"), py::arg("pool_mode"), py::arg("aligned"));
}
"""


def build_mmcv_kernels(source: str):
    """mmcv's own NMS and RoIAlign CPU kernels, compiled from its source tree, installed as
    ``mmcv._ext`` (mmcv's other op names exist and raise, so ``import mmcv.ops`` works)."""
    import os
    import shutil
    import tempfile
    import types

    from torch.utils.cpp_extension import load
    csrc = os.path.join(source, 'mmcv', 'ops', 'csrc')
    build = tempfile.mkdtemp()
    binding = os.path.join(build, 'binding.cpp')
    with open(binding, 'w') as f:
        f.write(PYBIND)
    sources = [binding]
    for rel in ('nms.cpp', 'roi_align.cpp', 'cpu/nms.cpp', 'cpu/roi_align.cpp'):
        copy = os.path.join(build, rel.replace('/', '_'))  # distinct object names for ninja
        shutil.copy(os.path.join(csrc, 'pytorch', rel), copy)
        sources.append(copy)
    ext = load('mmcv_kernels_subset', sources, extra_include_paths=[os.path.join(csrc, 'common')],
               extra_cflags=['-std=c++20', '-O2'], build_directory=build, verbose=False)

    class Ext(types.ModuleType):
        def __getattr__(self, name):
            if name.startswith('_'):
                raise AttributeError(name)

            def missing(*args, **kwargs):
                raise NotImplementedError(f'{name} was not compiled in this subset')
            return missing
    module = Ext('mmcv._ext')
    module.nms, module.roi_align_forward, module.roi_align_backward = (
        ext.nms, ext.roi_align_forward, ext.roi_align_backward)
    module.COMPILED_FROM = f'mmcv sources in {source} (nms, roi_align CPU kernels)'
    sys.modules['mmcv._ext'] = module
    return module.COMPILED_FROM


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('out')
    parser.add_argument('--mmcv-source', help="an unpacked mmcv 2.1.0 sdist: compile only its "
                        "NMS and RoIAlign CPU kernels instead of needing a full compiled mmcv")
    args = parser.parse_args()
    import mmcv

    if args.mmcv_source:
        compiled_from = build_mmcv_kernels(args.mmcv_source)
    else:
        import _inline_mm_mmcv_hook
        if _inline_mm_mmcv_hook.backend() != 'compiled':
            sys.exit('error: this environment has no compiled mmcv._ext; build one with '
                     '`INLINE_MM_MMCV=full make setup`, or pass --mmcv-source')
        compiled_from = 'compiled mmcv ' + mmcv.__version__
    gen = torch.Generator().manual_seed(20261201)
    record = dict(mmcv_version=mmcv.__version__, torch_version=str(torch.__version__),
                  compiled_from=compiled_from,
                  nms=[], batched_nms=[], roi_align=[])
    for case in nms_cases(gen):
        record['nms'].append(dict(case, keep=run_nms(case)))
    for case in batched_cases(gen):
        record['batched_nms'].append(dict(case, keep=run_batched(case)))
    for case in roi_align_cases(gen):
        out, grad = run_roi_align(case)
        record['roi_align'].append(dict(case, output=out, grad_input=grad))
    torch.save(record, args.out)
    print(f'wrote {args.out}: ' + ', '.join(f'{k} {len(v)}' for k, v in record.items()
                                            if isinstance(v, list)))


if __name__ == '__main__':
    main()
