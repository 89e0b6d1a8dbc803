"""The whole detector and segmentor as ONNX files (``inline_mm.deploy``): ONNX Runtime gives
the same metrics and detections as PyTorch on trained toy models, each image of a padded
batch gets its own result, the graph's ops equal the PyTorch code they stand for, and what
cannot be exported is refused by name."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from inline_mm.apis import init_model
from inline_mm.deploy import (NotExportable, OnnxModel, build_graph, evaluate, export_graph,
                              paste_masks)
from inline_mm.models import CheckpointError
from inline_mm.deploy import ops
from inline_mm.deploy.detection import TwoStageGraph
from inline_mm.deploy.evaluate import DetectionParity
from inline_mm.deploy.runtime import to_data_samples
from inline_mm.deploy.toy import TOY_GRAPH_SIZE, train_toy
from support import shrink_detector, shrink_segmentor, subprocess_env

ROOT = Path(__file__).resolve().parents[1]
#: the issue's bar for "the same detections"
BOX_PX, SCORE, MASK_IOU, AP, MIOU = 1.0, 1e-3, 0.95, 0.01, 0.5


# --------------------------------------------------------------------------- the graph's ops
def test_resize_bilinear_is_interpolate_of_each_region():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, 3, 20, 24, generator=gen)
    cells_in = torch.tensor([[20, 24], [7, 13], [1, 5], [16, 2]])
    cells_out = torch.tensor([[33, 30], [14, 26], [3, 9], [9, 4]])
    for align in (False, True):
        got = ops.resize_bilinear(x, cells_in, cells_out, (33, 30), align)
        for i, ((hi, wi), (ho, wo)) in enumerate(zip(cells_in.tolist(), cells_out.tolist())):
            ref = F.interpolate(x[i:i + 1, :, :hi, :wi], size=(ho, wo), mode='bilinear',
                                align_corners=align)
            torch.testing.assert_close(got[i:i + 1, :, :ho, :wo], ref, rtol=0, atol=1e-5)


def test_region_adaptive_avg_pool_is_adaptive_pool_of_each_region():
    x = torch.randn(3, 2, 16, 12)
    cells = torch.tensor([[16, 12], [5, 7], [2, 1]])
    for out in (1, 2, 3, 6):
        got = ops.region_adaptive_avg_pool(x, cells, out)
        for i, (h, w) in enumerate(cells.tolist()):
            ref = F.adaptive_avg_pool2d(x[i:i + 1, :, :h, :w], out)
            torch.testing.assert_close(got[i:i + 1], ref, rtol=0, atol=1e-6)


def test_paste_masks_is_mmdet_paste_on_cpu():
    from mmdet.models.roi_heads.mask_heads.fcn_mask_head import _do_paste_mask
    gen = torch.Generator().manual_seed(0)
    masks = torch.rand(5, 28, 28, generator=gen)
    boxes = torch.tensor([[3.2, 4.7, 40.1, 30.], [0., 0., 64., 48.], [50.5, 10., 51., 12.],
                          [10., 20., 10., 35.], [-2., 30., 20.3, 47.9]])
    got = paste_masks(masks, boxes, (48, 64), threshold=None)
    binary = paste_masks(masks.numpy(), boxes.numpy(), (48, 64), threshold=0.5)
    for i in range(5):
        ref = torch.zeros(48, 64)
        pasted, where = _do_paste_mask(masks[i:i + 1, None], boxes[i:i + 1], 48, 64, True)
        ref[where] = pasted[0]
        torch.testing.assert_close(torch.from_numpy(got[i]), ref, rtol=0, atol=1e-5)
        assert ((ref >= 0.5).numpy() != binary[i]).sum() <= 1


def test_each_roi_is_aligned_on_its_own_level_as_mmdet():
    """The graph's RoI features (each level's RoIs gathered, aligned, scattered back) equal
    mmdet's SingleRoIExtractor, for RoIs of every level and for none at all."""
    cfg = _config('inline_swin/mask-rcnn_inline-swin-t_fpn_1x_coco.py')
    model = init_model(cfg)
    extractor = model.roi_head.bbox_roi_extractor
    gen = torch.Generator().manual_seed(0)
    c = extractor.out_channels
    maps = [torch.randn(2, c, 64 // s, 96 // s, generator=gen) for s in (4, 8, 16, 32)]
    xy = torch.rand(40, 2, generator=gen) * 40
    wh = torch.rand(40, 1, generator=gen) ** 2 * 800 + 1            # scales of every level
    rois = torch.cat([torch.randint(0, 2, (40, 1), generator=gen).float(), xy, xy + wh], 1)
    levels = extractor.map_roi_levels(rois, 4)
    assert set(levels.tolist()) == {0, 1, 2, 3}
    for r in (rois, rois[:0], rois[levels == 3]):
        with torch.no_grad():
            torch.testing.assert_close(TwoStageGraph.roi_features(extractor, maps, r),
                                       extractor(maps, r), rtol=0, atol=1e-5)


def test_nms_keep_exports_as_standard_nms(tmp_path):
    """NonMaxSuppression in ONNX Runtime keeps what mmcv's nms keeps, per image, with the
    score threshold and the cap on kept boxes."""
    import onnxruntime as ort

    class Keep(torch.nn.Module):
        def forward(self, boxes, scores):
            return ops.nms_keep(boxes, scores, 0.5, 7, 0.1)

    gen = torch.Generator().manual_seed(0)

    def batch(b, n):
        xy = torch.rand(b, n, 2, generator=gen) * 50
        boxes = torch.cat([xy, xy + torch.rand(b, n, 2, generator=gen) * 20 + 1], -1)
        scores = torch.rand(b, n, generator=gen)
        scores[:, :5] = 0.1                              # exactly at the threshold: dropped
        return boxes, scores

    path = str(tmp_path / 'nms.onnx')
    torch.onnx.export(Keep(), batch(2, 30), path, input_names=['boxes', 'scores'],
                      dynamic_axes={'boxes': {0: 'b', 1: 'n'}, 'scores': {0: 'b', 1: 'n'}},
                      opset_version=17, dynamo=False)
    session = ort.InferenceSession(path, providers=['CPUExecutionProvider'])
    for b, n in ((1, 50), (3, 200)):
        boxes, scores = batch(b, n)
        got = session.run(None, {'boxes': boxes.numpy(), 'scores': scores.numpy()})[0]
        assert (got == Keep()(boxes, scores).numpy()).all()
        assert (got.sum(1) <= 7).all() and not got[:, :5].any()


def test_edges_extend_each_region():
    x = torch.arange(2 * 4 * 5, dtype=torch.float32).view(2, 1, 4, 5)
    got = ops.extend_edges(x, torch.tensor([[2, 3], [4, 5]]))
    assert torch.equal(got[1], x[1])
    assert torch.equal(got[0, 0], x[0, 0, [0, 1, 1, 1]][:, [0, 1, 2, 2, 2]])


# --------------------------------------------------------------------------- trained toys
@pytest.fixture(scope='module')
def toy(tmp_path_factory):
    """toy(kind) -> dict: the toy model (:mod:`inline_mm.deploy.toy`) trained once in the
    module, its config, checkpoint, metrics and ONNX file (at ``TOY_GRAPH_SIZE``: wider
    than its images, so that every image is padded)."""
    made = {}

    def get(kind):
        if kind not in made:
            work = tmp_path_factory.mktemp(f'toy_{kind}')
            config, checkpoint, metrics = train_toy(kind, str(work))
            model = init_model(config, checkpoint)
            cfg = model.cfg
            path = export_graph(build_graph(model, TOY_GRAPH_SIZE[kind]),
                                str(work / 'model.onnx'))
            made[kind] = dict(config=config, checkpoint=checkpoint, metrics=metrics,
                              model=model, cfg=cfg, onnx=path, work=work)
        return made[kind]
    return get


def _assert_same_detections(parity: dict):
    assert parity['matched'] > 0 and not parity['unmatched'], parity
    assert parity['max_box_diff_px'] <= BOX_PX, parity
    assert parity['max_score_diff'] <= SCORE, parity
    assert parity['min_mask_iou'] >= MASK_IOU, parity


def _train_images(cfg):
    from mmengine.registry import DefaultScope
    from mmengine.runner import Runner
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        loader = Runner.build_dataloader(cfg.test_dataloader)
        return [d for batch in loader for d in zip(batch['inputs'], batch['data_samples'])]


@pytest.mark.subprocess
@pytest.mark.xdist_group('deploy')
def test_mask_rcnn_test_tool_on_resized_images_gives_pytorch_metrics(toy):
    """tools/deployment/test_onnx.py on the toy Mask R-CNN with a test pipeline that resizes
    its 96x96 images to 96x128 (H x W: a scale factor of 4/3 across, 1 down; the graph's
    canvas, and sides that are multiples of 32, so that no image is padded: at 80 px mmdet
    pads to 96 and its NMS among the padding's equal scores is up to its sort, see
    test_padded_batch_gives_each_image_its_own_detections):
    the masks pasted at the original size from the scale factor, as mmdet pastes them, so
    every metric (AP, AP75, ...) within 0.01 of PyTorch's and the same detections."""
    t = toy('mask_rcnn')
    proc = subprocess.run(
        [sys.executable, 'tools/deployment/test_onnx.py', t['config'], t['onnx'],
         '--checkpoint', t['checkpoint'], '--fail-above', str(AP),
         '--cfg-options', 'test_dataloader.dataset.pipeline.2.scale=(128,96)',
         'test_dataloader.dataset.pipeline.2.keep_ratio=False'],
        cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    for key in ('coco/bbox_mAP', 'coco/segm_mAP', 'coco/bbox_mAP_75', 'coco/segm_mAP_75'):
        assert abs(report['onnxruntime'][key] - report['pytorch'][key]) <= AP, report
    assert min(report['pytorch']['coco/bbox_mAP'], report['pytorch']['coco/segm_mAP']) >= 0.1
    _assert_same_detections(report['parity'])


@pytest.mark.xdist_group('deploy')
@pytest.mark.parametrize('kind', ['mask_rcnn', 'retinanet'])
def test_padded_batch_gives_each_image_its_own_detections(toy, kind):
    """The toy images cut to other sizes, all in one padded batch in ONNX Runtime: each gets
    what mmdet's test_step gives it alone. (Sizes that are multiples of 32: mmdet pads an
    image to them, and the anchors on that padding all score alike, so which of them its
    NMS keeps is up to its sort, which no other implementation reproduces; docs/deploy.md.)"""
    from mmdet.structures import DetDataSample
    t = toy(kind)
    cuts = [(96, 96), (64, 64), (64, 96), (96, 32), (32, 96), (64, 32), (96, 64), (32, 64)]
    images, samples = [], []
    for (h, w), (img, ds) in zip(cuts, _train_images(t['cfg'])):
        images.append(img[:, :h, :w].contiguous())
        samples.append(DetDataSample(metainfo=dict(ds.metainfo, img_shape=(h, w),
                                                   ori_shape=(h, w), scale_factor=(1., 1.))))
    runtime = OnnxModel(t['onnx'])
    canvas, sizes = runtime.pad(images)
    out = runtime(canvas, sizes)
    if kind == 'mask_rcnn':     # one 28x28 mask per detection of the batch, nothing else
        assert out['masks'].shape == ((out['labels'] >= 0).sum(), 28, 28), out['masks'].shape
    got = to_data_samples(out, sizes, samples, runtime.task, runtime.mask_thr_binary)
    with torch.no_grad():
        alone = [t['model'].test_step(dict(inputs=[img], data_samples=[s]))[0]
                 for img, s in zip(images, samples)]
    parity = DetectionParity()
    parity.add(alone, got)
    _assert_same_detections(parity.summary())


@pytest.mark.subprocess
@pytest.mark.xdist_group('deploy')
def test_retinanet_export_tool_and_metrics(toy, tmp_path):
    """tools/deployment/export_onnx.py --whole on the toy RetinaNet: its own check against
    PyTorch, then the file's AP and detections on the toy images equal PyTorch's."""
    t = toy('retinanet')
    assert t['metrics']['coco/bbox_mAP'] >= 0.5, t['metrics']
    out = tmp_path / 'retinanet.onnx'
    proc = subprocess.run(
        [sys.executable, 'tools/deployment/export_onnx.py', t['config'], '--whole',
         '--checkpoint', t['checkpoint'], '--size', '96', '128', '--out', str(out)],
        cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report['task'] == 'detection' and report['outputs'] == ['dets', 'labels']
    _assert_same_detections(report['check'])
    result = evaluate(t['cfg'], str(out), model=t['model'])
    assert abs(result['onnxruntime']['coco/bbox_mAP'] - result['pytorch']['coco/bbox_mAP']) <= AP
    _assert_same_detections(result['parity'])


@pytest.mark.xdist_group('deploy')
def test_upernet_miou_and_padded_batch(toy):
    """The toy UperNet (images of 72-120 px, any ratio, each alone in mmseg at its own
    size): the same mIoU and class maps from ONNX Runtime, one image at a time and all in
    one padded batch."""
    t = toy('upernet')
    result = evaluate(t['cfg'], t['onnx'], model=t['model'])
    assert abs(result['onnxruntime']['mIoU'] - result['pytorch']['mIoU']) <= MIOU, result
    assert result['pytorch']['mIoU'] >= 20, result['pytorch']
    assert result['parity']['worst_image_agreement'] >= 0.999, result['parity']
    runtime = OnnxModel(t['onnx'])
    items = _train_images(t['cfg'])
    canvas, sizes = runtime.pad([img for img, _ in items])
    batch = runtime(canvas, sizes)
    for i in range(len(items)):
        one = runtime(canvas[i:i + 1], sizes[i:i + 1])
        assert np.array_equal(one['seg'][0], batch['seg'][i])


@pytest.mark.xdist_group('deploy')
@pytest.mark.parametrize('kind', ['mask_rcnn', 'retinanet', 'upernet'])
def test_filled_graph_gives_each_image_what_pytorch_gives_it(toy, kind):
    """The graph for images that fill the canvas (canvas='filled'), on one batch of the toy
    images cut to its size: each gets what test_step gives it alone, with none of the
    padded graph's masks (no Where in the preprocessing, backbone, neck or heads); the file
    records its canvas, and OnnxModel refuses a smaller image for it."""
    import onnx
    from mmdet.structures import DetDataSample
    from mmseg.structures import SegDataSample

    from inline_mm.deploy import read_metadata
    from inline_mm.deploy.evaluate import SegmentationParity
    t = toy(kind)
    side = 64 if kind == 'upernet' else 96                 # toy images: 72-120 px, 96 px
    sample = SegDataSample if kind == 'upernet' else DetDataSample
    images, samples = [], []
    for img, ds in _train_images(t['cfg']):
        images.append(img[:, :side, :side].contiguous())
        samples.append(sample(metainfo=dict(img_path=ds.img_path, img_shape=(side, side),
                                            ori_shape=(side, side), scale_factor=(1., 1.))))
    path = export_graph(build_graph(t['model'], (side, side), 'filled'),
                        str(t['work'] / 'filled.onnx'))
    runtime = OnnxModel(path)
    assert runtime.canvas == read_metadata(path)['canvas'] == 'filled'
    assert "canvas='filled'" in repr(runtime)
    canvas, sizes = runtime.pad(images)
    got = to_data_samples(runtime(canvas, sizes), sizes, samples, runtime.task,
                          runtime.mask_thr_binary)
    with torch.no_grad():
        alone = [t['model'].test_step(dict(inputs=[img], data_samples=[s]))[0]
                 for img, s in zip(images, samples)]
    parity = SegmentationParity() if kind == 'upernet' else DetectionParity()
    parity.add(alone, got)
    if kind == 'upernet':
        assert parity.summary()['worst_image_agreement'] >= 0.999, parity.summary()
    else:
        _assert_same_detections(parity.summary())

    def masks(file):
        parts = ('/preprocess', '/backbone', '/neck', '/rpn_head', '/bbox_head', '/decode_head')
        return [n.name for n in onnx.load(file).graph.node
                if n.op_type == 'Where' and n.name.startswith(parts)]
    assert not masks(path) and masks(t['onnx'])
    filled = f"fill its {side}x{side} canvas .canvas='filled'"
    with pytest.raises(ValueError, match=f'image 1 is {side}x{side - 32}: .*{filled}'):
        runtime.pad([images[0], images[1][:, :, :side - 32]])
    with pytest.raises(ValueError, match=f'sizes .\\({side - 32}, {side}\\).: .*{filled}'):
        runtime(canvas[:1], np.array([[side - 32, side]]))


@pytest.mark.xdist_group('deploy')
def test_openvino_runs_the_file_as_onnx_runtime(toy):
    """OnnxModel(runtime='openvino') on the toy Mask R-CNN (the openvino extra; skipped
    without it, as in CI): at f32 the same metrics and detections as PyTorch."""
    pytest.importorskip('openvino')
    t = toy('mask_rcnn')
    result = evaluate(t['cfg'], t['onnx'], model=t['model'], runtime='openvino',
                      precision='f32')
    for key in ('coco/bbox_mAP', 'coco/segm_mAP'):
        assert abs(result['openvino'][key] - result['pytorch'][key]) <= AP, result
    _assert_same_detections(result['parity'])
    assert 'runtime=openvino' in repr(OnnxModel(t['onnx'], runtime='openvino'))


def test_a_runtime_or_precision_not_offered_is_refused():
    with pytest.raises(ValueError, match="runtime='tensorrt': choose among onnxruntime, "
                                         'openvino'):
        OnnxModel('any.onnx', runtime='tensorrt')
    with pytest.raises(ValueError, match="precision='bf16' for onnxruntime"):
        OnnxModel('any.onnx', precision='bf16')
    model = init_model(_config('inline_swin/retinanet_inline-swin-t_fpn_1x_coco.py'))
    with pytest.raises(ValueError, match="canvas='full': choose 'padded' .* or 'filled'"):
        build_graph(model, (64, 96), canvas='full')


# --------------------------------------------------------------------------- bad input
def _config(path, shrink=shrink_detector):
    from mmengine.config import Config
    return shrink(Config.fromfile(str(ROOT / 'configs' / path)))


@pytest.mark.parametrize('path, name', [
    ('inline_swin/cascade-mask-rcnn_inline-swin-t_fpn_1x_coco.py', 'CascadeRoIHead'),
    ('inline_swin/fcos_inline-swin-t_fpn_gn-head_1x_coco.py', 'FCOSHead'),
    ('inline_swin/segformer_inline-swin-t_8xb2-160k_ade20k-512x512.py', 'SegformerHead'),
    ('inline_deit/inline-deit-t-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py', 'MultiLevelNeck'),
    ('inline_swin/inline-swin-t-in1k-pre_upernet_8xb2-160k_ade20k-512x512-slide.py', "'slide'"),
])
def test_a_model_whose_post_processing_is_not_exportable_is_named(path, name):
    shrink = shrink_segmentor if 'ade20k' in path else shrink_detector
    model = init_model(_config(path, shrink))
    with pytest.raises(NotExportable, match=name):
        build_graph(model, (64, 64))


def test_an_input_size_off_the_divisor_is_refused():
    model = init_model(_config('inline_swin/mask-rcnn_inline-swin-t_fpn_1x_coco.py'))
    with pytest.raises(NotExportable,
                       match='pad_size_divisor .32., to which mmdet pads every image: export '
                             'at 800x1344'):
        build_graph(model, (800, 1333))


def test_a_checkpoint_of_another_model_is_refused(tmp_path):
    from conftest import golden_weights
    cfg = _config('inline_swin/mask-rcnn_inline-swin-t_fpn_1x_coco.py')
    model = init_model(cfg)
    state = model.state_dict()
    other = dict(state, **{'roi_head.bbox_head.fc_cls.weight': torch.zeros(4, 32)})
    torch.save({'state_dict': other}, tmp_path / 'other.pth')
    with pytest.raises(CheckpointError, match='fc_cls.weight: checkpoint .4, 32. vs model .81, '
                                            '32.*pass the config the checkpoint was trained'):
        init_model(cfg, str(tmp_path / 'other.pth'))
    backbone = {k: v for k, v in state.items() if k.startswith('backbone.')}
    torch.save({'state_dict': backbone}, tmp_path / 'backbone.pth')
    with pytest.raises(CheckpointError, match='holds a backbone only'):
        init_model(cfg, str(tmp_path / 'backbone.pth'))
    with pytest.raises(CheckpointError, match='official ImageNet classification file'):
        init_model(cfg, golden_weights('inline_swin_tiny_224'))


def test_an_image_not_of_the_graph_size_is_refused(tmp_path):
    import onnxruntime as ort
    cfg = _config('inline_swin/retinanet_inline-swin-t_fpn_1x_coco.py')
    model = init_model(cfg)
    path = export_graph(build_graph(model, (64, 96)), str(tmp_path / 'r.onnx'))
    runtime = OnnxModel(path)
    with pytest.raises(ValueError, match='image 1 is 80x90, larger than the 64x96 input'):
        runtime.pad([torch.zeros(3, 64, 64), torch.zeros(3, 80, 90)])
    with pytest.raises(ValueError, match=r'takes \(B, 3, 64, 96\) images; pad smaller'):
        runtime(np.zeros((1, 3, 64, 64), np.float32), np.array([[64, 64]]))
    empty = r'an empty batch: .* takes input \(B, 3, 64, 96\) and sizes \(B, 2\) with B >= 1'
    with pytest.raises(ValueError, match=empty):
        runtime(np.zeros((0, 3, 64, 96), np.float32), np.zeros((0, 2), np.int64))
    with pytest.raises(ValueError, match=empty):
        runtime.pad([])
    with pytest.warns(UserWarning,
                      match=r'pixel values lie within 0-1 \(largest 0.5\): .* \(0-255\)'):
        runtime(np.full((1, 3, 64, 96), 0.5, np.float32), np.array([[64, 96]]))
    # ONNX Runtime itself refuses another size, before running anything
    session = ort.InferenceSession(path, providers=['CPUExecutionProvider'])
    with pytest.raises(Exception, match='invalid dimensions'):
        session.run(None, {'input': np.zeros((1, 3, 64, 64), np.float32),
                           'sizes': np.array([[64, 64]])})


@pytest.mark.subprocess
def test_gpu_tensorrt_check_runs_its_cpu_part(tmp_path):
    """tools/dev/gpu/cuda_check.py --only tensorrt without a GPU (--device cpu): training,
    export, the padded batch and the comparison run, the PyTorch graph in the engine's
    place."""
    proc = subprocess.run(
        [sys.executable, 'tools/dev/gpu/cuda_check.py', '--device', 'cpu', '--only', 'tensorrt',
         '--out-dir', str(tmp_path)], cwd=ROOT, env=subprocess_env(), capture_output=True,
        text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert 'ok   TensorRT' in proc.stdout and 'cpu dry run' in proc.stdout, proc.stdout[-2000:]
