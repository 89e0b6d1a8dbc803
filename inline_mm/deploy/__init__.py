"""Deployment: InLine models as graphs that run without PyTorch (docs/deploy.md,
docs/export_and_timm.md).

* The backbone alone, one input size per graph (:mod:`.backbone`): ``trace_backbone``,
  ``export_onnx``, ``check_onnx``, and what the graphs refuse.
* Whole detectors and segmentors as single ONNX files that ONNX Runtime runs with no
  custom-op library: :func:`build_graph` (a model of :func:`inline_mm.apis.init_model` with
  its preprocessing and post-processing for one input size; ``canvas='filled'``: for images
  that fill it, without the padding masks), :func:`export_graph` (the ``.onnx`` file);
  :class:`OnnxModel` (an ONNX Runtime session of such a file, or OpenVINO's: padding,
  running, per-image results), :func:`paste_masks` (each detection's mask into its image, as
  mmdet pastes it), :func:`to_data_samples` (its outputs as mmdet / mmseg results);
  :func:`evaluate` (``tools/test.py`` for a file, with the comparison against PyTorch).

Supported whole models: Faster / Mask R-CNN and RetinaNet (mmdet) and UperNet (mmseg) on InLine
backbones; anything else is refused with :class:`NotExportable`, naming the part.
"""
from .build import build_graph, export_graph, read_metadata
from .common import NotExportable
from .evaluate import evaluate
from .runtime import OnnxModel, paste_masks, to_data_samples

__all__ = ['build_graph', 'export_graph', 'read_metadata', 'NotExportable',
           'OnnxModel', 'paste_masks', 'to_data_samples', 'evaluate']
