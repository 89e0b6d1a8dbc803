"""The app (python -m inline_mm.app): its handlers without a browser, and the page in a real
one (Debian's chromium, headless, through Playwright).

The handlers read images with clear refusals, predict and draw (a detector with its score
slider, a segmentor with its legend), and show the exact maps of a point; every bad input
returns a message. In the browser: the app started as a user starts it, an image uploaded,
two points clicked; the maps come back at the image's size and equal the maps tool's
(``tools/attention_map.py --npz``) for those points; bad input leaves a message and a serving
page; the page and the server reach nothing but 127.0.0.1.
"""
import io
import json
import shutil
import subprocess
import sys
import textwrap
import threading
import types
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image as PILImage

from inline_mm.visualization.attention_maps import (Preprocess, attention_maps, capture_attention,
                                                    load_image, map_stride, point_to_cell,
                                                    prepare_image)
from inline_mm.visualization.attention_views import (kernel_taps, load_maps, map_at_image_size,
                                                     pixel_cells, save_maps)
from support import ROOT, free_port, subprocess_env, write_tiny_config

gr = pytest.importorskip('gradio', reason='the app needs gradio: pip install inline_mm[app]')

from inline_mm.app import ui  # noqa: E402
from inline_mm.app.viewer import (AppError, Viewer, block_choices,  # noqa: E402
                                  read_image)

#: the demo's detector (make app's default config)
NANO = ROOT / 'configs' / 'inline_swin' / 'mask-rcnn_inline-swin-nano_fpn_1xb4-550it_toy-coco.py'
SEG = ROOT / 'configs' / 'inline_pvt' / 'fpn_inline-pvt-t_4xb4-40k_ade20k-512x512.py'
SCREENSHOT = ROOT / 'work_dirs' / 'app_browser_test.png'
CHROMIUM = shutil.which('chromium') or '/usr/bin/chromium'
REUSED = 'same image and block as before: its attention from the last click was used again'


def photo(path: Path, hw=(110, 150), seed=0) -> Path:
    """A non-square image with smooth colours and two shapes."""
    rng = np.random.default_rng(seed)
    h, w = hw
    yy, xx = np.mgrid[:h, :w]
    rgb = np.stack([xx * 255 // w, yy * 255 // h, (xx + 2 * yy) % 256], -1).astype(np.uint8)
    rgb[20:60, 30:80] = rng.integers(0, 256, 3)
    rgb[70:100, 100:140] = rng.integers(0, 256, 3)
    PILImage.fromarray(rgb).save(path)
    return path


@pytest.fixture(scope='module')
def detector():
    return Viewer(str(NANO), device='cpu')


@pytest.fixture(scope='module')
def handlers(detector):
    return ui.Handlers(detector)


def payload(path, name=None):
    """What the page sends for an uploaded file (its preprocessing off)."""
    return {'path': str(path), 'orig_name': name or Path(path).name}


# ------------------------------------------------------------------ reading images
def test_images_that_are_not_images_or_too_large_or_too_small(tmp_path, detector, monkeypatch):
    text = tmp_path / 'notes.png'
    text.write_text('not an image')
    with pytest.raises(AppError, match=r'notes.png is not an image that can be read.*upload a '
                       'PNG, JPEG'):
        read_image(str(text))
    with pytest.raises(AppError, match='no such file'):
        read_image(str(tmp_path / 'gone.png'))
    big = read_image(str(photo(tmp_path / 'big.png', (120, 300))), max_side=100)
    assert big.hw == (40, 100) and big.original_hw == (120, 300)
    assert big.notes == ['big.png is 300x120 pixels: downscaled to 100x40 (the app keeps at '
                         'most 100 pixels a side; start it with --max-side to change that)']
    monkeypatch.setattr(PILImage, 'MAX_IMAGE_PIXELS', 1000)      # PIL's bomb limit, lowered
    with pytest.raises(AppError, match='too many pixels to decode safely'):
        read_image(str(tmp_path / 'big.png'))
    monkeypatch.undo()
    # a side below the minimum, as the file is (not after the test resize scales it up)
    for hw in [(1, 1), (31, 400)]:
        with pytest.raises(AppError, match=rf'small.png is {hw[1]}x{hw[0]} pixels: too small; '
                           'the backbone needs at least 32 pixels a side'):
            read_image(str(photo(tmp_path / 'small.png', hw)))
    # the nano config resizes to fit 256x256: 1000x40 becomes 256x10
    with pytest.raises(AppError, match=r'thin.png \(1000x40 pixels\) is too small for the '
                       r"backbone.*makes it 256x10.*at least 32 pixels"):
        detector.read(str(photo(tmp_path / 'thin.png', (40, 1000))))
    image = detector.read(str(photo(tmp_path / 'ok.png')))
    # the pixels the maps tool reads (load_image: PIL, RGB)
    assert np.array_equal(image.pixels, np.asarray(PILImage.open(tmp_path / 'ok.png')))
    # transparent pixels are white (as the page shows them), for the app and the maps tool
    rgba = np.asarray(PILImage.open(tmp_path / 'ok.png').convert('RGBA')).copy()
    rgba[:, :40, 3] = 0
    rgba[:, 40:80, 3] = 128
    PILImage.fromarray(rgba).save(tmp_path / 'clear.png')
    clear = detector.read(str(tmp_path / 'clear.png')).pixels
    assert (clear[:, :40] == 255).all()
    half = rgba[:, 40:80, :3].astype(np.float64) * 128 / 255 + 255 * 127 / 255
    assert np.abs(clear[:, 40:80] - half).max() <= 1
    np.testing.assert_array_equal(clear, load_image(str(tmp_path / 'clear.png')))


def test_pixels_fall_in_the_tokens_point_to_cell_names():
    for image_hw, resized, stride in [((110, 150), (188, 256), 4), ((75, 61), (800, 651), 32),
                                      ((192, 256), (192, 256), 8)]:
        grid = tuple(-(-s // stride) for s in resized)
        rows, cols = pixel_cells(image_hw, resized, stride, grid)
        for y in range(image_hw[0]):
            for x in range(0, image_hw[1], 7):
                assert point_to_cell((x, y), image_hw, resized, stride, grid) == \
                    (rows[y], cols[x])
        values = np.arange(grid[0] * grid[1], dtype=np.float64).reshape(grid)
        full = map_at_image_size(values, image_hw, resized, stride)
        assert full.shape == image_hw and full[-1, -1] == values[rows[-1], cols[-1]]


# ------------------------------------------------------------------ blocks
def test_block_choices_say_why_a_block_has_no_map(detector):
    labels = {c.label: c for c in detector.choices}
    assert list(labels) == ['stage 0 block 0 (InLine)', 'stage 1 block 0 (InLine)',
                            'stage 2 block 0 (InLine)', 'stage 2 block 1 (InLine)',
                            'stage 3 block 0 (Softmax)']
    assert 'is a Softmax block' in labels['stage 3 block 0 (Softmax)'].why_not
    assert detector.default_choice.label == 'stage 0 block 0 (InLine)'
    assert labels['stage 2 block 0 (InLine)'].heads == 4
    from inline_mm.models import FAMILIES
    swin, cswin = FAMILIES['InLineSwin'], FAMILIES['InLineCSwin']
    windowed = block_choices(swin.cls(**swin.smoke, inline_cfg=dict(window_size=4)))
    assert windowed[0].label == 'stage 0 block 0 (InLine, 4x4 windows)'
    assert 'no map over the whole image' in windowed[0].why_not
    branches = [c.label for c in block_choices(cswin.cls(**cswin.smoke)) if c.stage == 0]
    assert branches == ['stage 0 block 0 (InLine)']


# ------------------------------------------------------------------ the handlers
def test_a_detection_session_without_a_browser(tmp_path, handlers, detector):
    """Upload, slider, two clicks (the second reuses the capture), a head, another block;
    the maps are attention_maps' for the clicked tokens."""
    h = handlers
    path = photo(tmp_path / 'photo.png')
    out = h.load(payload(path), 0.0, None, progress=None)
    state = out['state']
    assert out['predictions'].shape == (110, 150, 3)
    assert 'photo.png, 150x110: 100 of 100 detections at score >= 0.00' in out['message']
    assert 'rectangle' in out['legend'] or 'circle' in out['legend']
    # the slider filters without predicting again: above every score nothing is drawn
    above = h.rethreshold(1.0, state)
    assert np.array_equal(above['predictions'], state.image.pixels)
    assert 'photo.png, 150x110: 0 of 100 detections at score >= 1.00' in above['message']
    assert '0 of 100 detections' in detector.draw(state.image, state.prediction, 1.0)[2]

    block = detector.default_choice.label
    first = h.attend(20, 30, block, ui.MEAN_OVER_HEADS, 0.0, state, progress=None)
    assert first['message'].startswith('stage 0 block 0 (InLine): the backbone ran on the image')
    second = h.attend(120, 90, block, 'head 0', 0.0, state, progress=None)
    assert second['message'].startswith(REUSED)
    assert (second['x'], second['y']) == (120, 90) and state.point == (120, 90)
    for result in (first, second):
        for m in ('inline', 'linear', 'softmax'):
            assert result[f'view-{m}']['value'].shape == (110, 150, 3)
        assert result['view-kernel'].shape[2] == 3
    a, b = load_maps(first['weights']), load_maps(second['weights'])
    assert not np.array_equal(a['inline'], b['inline'])
    # each map's colour bar: white at the uniform weight 1/n (n = 47 x 64 tokens), its ends
    # the map's largest distance from 1/n; red above 1/n, blue below
    for m in ('inline', 'linear', 'softmax'):
        bar = first[f'bar-{m}']
        lo, uniform, hi = (float(bar.split(f'data-{k}="')[1].split('"')[0])
                           for k in ('lo', 'uniform', 'hi'))
        assert uniform == pytest.approx(1 / (47 * 64), rel=1e-5) and '1/n = ' in bar
        assert max(hi - uniform, uniform - lo) == pytest.approx(
            np.abs(a[m][0] - 1 / (47 * 64)).max(), rel=1e-5)
        picture = first[f'view-{m}']['value'].astype(int)
        cells = pixel_cells((110, 150), (188, 256), 4, (47, 64))
        values = a[m][0][cells[0][:, None], cells[1][None, :]]
        red = picture[values == values.max()][0]
        assert red[0] > red[2], (m, red)
        if values.min() < uniform:
            blue = picture[values == values.min()][0]
            assert blue[2] > blue[0], (m, blue)
    assert int(b['head']) == 0 and int(a['head']) == -1
    # the same numbers from the library, computed here
    x, resized = prepare_image(state.image.pixels, Preprocess.from_config(detector.cfg))
    cap = capture_attention(detector.backbone, x, 0, 0, valid_sizes=[resized])
    stride = map_stride(cap.input_hw, cap.hw)
    cell = point_to_cell((120, 90), (110, 150), resized, stride, cap.grid_of(0))
    maps = attention_maps(cap, [cell], head=0)
    assert tuple(b['cells'][0]) == cell
    np.testing.assert_array_equal(b['inline'][0], maps.grid_map('inline', 0).numpy())
    np.testing.assert_array_equal(b['kernel'], maps.kernel.numpy())

    # another block: a new capture; a Softmax block says why it has no map
    other = h.attend(20, 30, 'stage 2 block 0 (InLine)', 'head 3', 0.0, state, progress=None)
    assert other['message'].startswith('stage 2 block 0 (InLine): the backbone ran')
    assert load_maps(other['weights'])['inline'].shape == (1, 12, 16)   # 188x256 / 16
    changed = h.block_changed('stage 3 block 0 (Softmax)')
    assert 'is a Softmax block' in changed['message'] and changed['view-inline'] is None
    assert changed['head']['choices'] == [(ui.MEAN_OVER_HEADS, ui.MEAN_OVER_HEADS)] or \
        changed['head']['choices'] == [ui.MEAN_OVER_HEADS]
    softmax = h.attend(20, 30, 'stage 3 block 0 (Softmax)', None, 0.0, state, progress=None)
    assert 'is a Softmax block' in softmax['message'] and softmax['view-inline'] is None
    # the same query again, as the page does after a change of block or head (one capture
    # is kept: stage 2's replaced stage 0's)
    again = h.again(block, 'head 0', 0.0, state, progress=None)
    assert again['x'] == 20 and again['message'].startswith('stage 0 block 0 (InLine): the '
                                                            'backbone ran')
    assert h.again(block, ui.MEAN_OVER_HEADS, 0.0, state, progress=None)['message'].startswith(
        REUSED)


# ------------------------------------------------------------------ users at once
def _held_in_the_backbone(viewer, request):
    """Run ``request`` in a thread that stops inside the backbone, at the entry of stage 1
    (after stage 0's attention ran), until released: ``(thread, result, reached, release)``."""
    reached, release, result = threading.Event(), threading.Event(), {}

    def run():
        try:
            result['value'] = request()
        except Exception as e:          # (the check below reports it)
            result['error'] = e

    worker = threading.Thread(target=run)

    def hold(module, args):
        if threading.current_thread() is worker and not reached.is_set():
            reached.set()
            assert release.wait(60)
    handle = viewer.backbone.layers[1].register_forward_pre_hook(hold)
    worker.start()
    assert reached.wait(120), 'the held request never reached stage 1'
    return worker, result, release, handle


def test_users_at_once_each_get_their_own_maps_and_predictions(tmp_path, detector):
    """The forced interleaving: user A's request is held inside the backbone, after the
    captured block ran, while user B's request (maps of another image at the same block, or
    that image's predictions) runs whole on the same model; then A goes on. Every answer
    equals the same request alone: weights within 1e-9 (float64), predictions equal."""
    viewer = detector
    choice = viewer.default_choice
    a = viewer.read(str(photo(tmp_path / 'a.png', seed=1)), 'a.png')
    b = viewer.read(str(photo(tmp_path / 'b.png', seed=2)), 'b.png')
    b.pixels = np.ascontiguousarray(255 - b.pixels)       # (another picture, same size)
    maps = lambda image, point: lambda: viewer.attention(image, point, choice)[0].maps.weights
    predict = lambda image: lambda: viewer.predict(image)
    requests = {'A maps': maps(a, (40, 50)), 'B maps': maps(b, (100, 20)),
                'B predictions': predict(b)}
    alone = {name: request() for name, request in requests.items()}
    assert not np.allclose(alone['A maps']['inline'], alone['B maps']['inline'], atol=1e-9)

    def same(name, got):
        want = alone[name]
        if isinstance(want, dict):
            for m in want:
                np.testing.assert_allclose(got[m].numpy(), want[m].numpy(), rtol=0, atol=1e-9,
                                           err_msg=f'{name}: {m}')
        else:
            for key in ('boxes', 'scores', 'labels', 'masks'):
                np.testing.assert_array_equal(getattr(got, key), getattr(want, key),
                                              err_msg=f'{name}: {key}')

    wrong = []
    for held, meanwhile in [('A maps', 'B maps'), ('A maps', 'B predictions')]:
        worker, result, release, handle = _held_in_the_backbone(viewer, requests[held])
        try:
            same(meanwhile, requests[meanwhile]())       # B, whole, while A waits inside
        finally:
            release.set()
            worker.join(120)
            handle.remove()
        try:
            assert 'error' not in result, result.get('error')
            same(held, result['value'])
        except AssertionError as e:
            wrong.append(f'{held} while {meanwhile} ran: {str(e).strip()[:300]}')
    assert not wrong, '\n'.join(wrong)


def test_only_a_tabs_newest_request_reaches_its_page(tmp_path, detector):
    """The forced interleaving of one tab's requests: a request is held inside the backbone
    while another runs whole, then goes on. A request superseded by a newer one of its tab
    (another image; a click on the old image) returns nothing to draw, and leaves the tab's
    session as it was; the second ``change`` Gradio fires for one upload runs nothing;
    another tab's requests supersede nothing."""
    h = ui.Handlers(detector)
    tab = lambda name: types.SimpleNamespace(session_hash=name)
    a, b = payload(photo(tmp_path / 'a.png', seed=1)), payload(photo(tmp_path / 'b.png', seed=2))
    load = lambda image, who: lambda: h.load(image, 0.0, None, progress=None, request=tab(who))
    block = detector.default_choice.label

    def held_while(request, meanwhile):
        worker, result, release, handle = _held_in_the_backbone(detector, request)
        try:
            during = meanwhile()
        finally:
            release.set()
            worker.join(120)
            handle.remove()
        assert 'error' not in result, result.get('error')
        return result['value'], during

    # (each case in a tab of its own: a tab's image again, with nothing between, runs nothing)
    # another tab's image: both answers reach their pages
    first, other = held_while(load(a, 'one'), load(b, 'two'))
    assert first['message'].startswith('a.png') and other['message'].startswith('b.png')
    # the same tab's next image: the older answer is dropped
    old, new = held_while(load(a, 'four'), load(b, 'four'))
    assert old == {} and new['message'].startswith('b.png')
    # the same upload's second change event: nothing runs, the first answers
    forward = []
    counted = detector.backbone.register_forward_hook(lambda *args: forward.append(1))
    try:
        first, again = held_while(load(a, 'three'), load(a, 'three'))
    finally:
        counted.remove()
    assert again == {} and len(forward) == 1
    assert first['message'].startswith('a.png') and first['state'] is not None
    # a click on the old image, answered after the new image's predictions: dropped, and
    # the old session keeps its (absent) query
    state = first['state']
    click = lambda: h.attend(40, 50, block, None, 0.0, state, progress=None,
                             request=tab('three'))
    clicked, new = held_while(click, load(b, 'three'))
    assert clicked == {} and state.point is None and state.captured is None
    assert new['message'].startswith('b.png')
    # and a click that stays the newest answers as ever
    assert h.attend(40, 50, block, None, 0.0, new['state'], progress=None,
                    request=tab('three'))['x'] == 40


def test_bad_input_leaves_a_message(tmp_path, handlers):
    h = handlers
    text = tmp_path / 'table.csv'
    text.write_text('a,b\n1,2\n')
    out = h.load(payload(text), 0.3, None, progress=None)
    assert out['message'].startswith('**Error:** table.csv is not an image that can be read')
    assert str(tmp_path) not in out['message']                   # no server paths
    odd = h.load(payload(text, 'mine.png'), 0.3, None, progress=None)['message']
    assert 'mine.png' in odd and str(tmp_path) not in odd and 'table.csv' not in odd
    assert out['predictions'] is None and out['state'] is None
    assert h.load(None, 0.3, None)['message'] == 'Upload an image or pick a sample.'
    assert 'no image yet' in h.attend(1, 1, 'stage 0 block 0 (InLine)', None, 0.3, None)['message']
    state = h.load(payload(photo(tmp_path / 'p.png')), 0.3, None, progress=None)['state']
    outside = h.attend(150, 10, 'stage 0 block 0 (InLine)', None, 0.3, state, progress=None)
    assert 'the point (150, 10) is outside the 150x110 image (x in 0..149, y in 0..109)' in \
        outside['message']
    assert 'give both x and y' in h.attend(None, 3, 'stage 0 block 0 (InLine)', None, 0.3,
                                           state)['message']
    assert 'has 1 head (0..0)' in h.attend(3, 3, 'stage 0 block 0 (InLine)', 'head 5', 0.3,
                                           state, progress=None)['message']
    assert 'no block' in h.attend(3, 3, 'stage 9 block 9', None, 0.3, state)['message']


def test_a_segmentor_draws_its_class_map_with_a_legend(tmp_path):
    cfg = write_tiny_config(SEG, tmp_path / 'seg.py')
    viewer = Viewer(str(cfg), device='cpu')
    assert viewer.kind == 'segmentation' and len(viewer.classes) == 150
    h = ui.Handlers(viewer)
    out = h.load(payload(photo(tmp_path / 'room.png', (64, 96))), 0.3, None, progress=None)
    assert out['predictions'].shape == (64, 96, 3)
    seg = out['state'].prediction.seg
    names = {viewer.classes[c] for c in np.unique(seg)}
    assert all(f'<td>{n}</td>' in out['legend'] for n in names)
    assert out['message'].endswith(f'{len(names)} classes in the image. Click a point on the '
                                   'predictions to see its attention.')
    views = h.attend(10, 60, viewer.default_choice.label, None, 0.3, out['state'], progress=None)
    assert views['view-inline']['value'].shape == (64, 96, 3)


def test_weights_files_and_the_model_line(tmp_path, detector):
    """A checkpoint of the whole model is loaded as it is (the page says so); backbone
    weights leave the rest random (said too); another model's file is refused."""
    ckpt = tmp_path / 'whole.pth'
    torch.save({'meta': {'dataset_meta': {'classes': ['a', 'b', 'c']}},
                'state_dict': detector.model.state_dict()}, ckpt)
    loaded = Viewer(str(NANO), str(ckpt), device='cpu', seed=5)
    assert 'weights: `' in loaded.describe() and '(the whole model)' in loaded.describe()
    assert loaded.classes == ('a', 'b', 'c') and not loaded.random
    for k, v in detector.model.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[k], v), k
    backbone = tmp_path / 'backbone.pth'
    torch.save({'state_dict': {f'backbone.{k}': v for k, v in
                               detector.backbone.state_dict().items()}}, backbone)
    partial = Viewer(str(NANO), str(backbone), device='cpu', seed=5)
    assert 'the rest of the model is **random**' in partial.describe()
    mine, theirs = partial.model.state_dict(), detector.model.state_dict()
    assert all(torch.equal(mine[k], v) for k, v in theirs.items() if k.startswith('backbone.'))
    assert not torch.equal(mine['neck.lateral_convs.0.conv.weight'],
                           theirs['neck.lateral_convs.0.conv.weight'])     # seed 5, not 0
    assert 'random weights' in detector.describe() and detector.random
    from inline_mm.models import CheckpointError
    other = tmp_path / 'other.pth'
    state = dict(detector.model.state_dict())
    state['roi_head.bbox_head.fc_cls.weight'] = torch.zeros(7, 256)
    torch.save({'state_dict': state}, other)
    with pytest.raises(CheckpointError, match='does not fit the model of'):
        Viewer(str(NANO), str(other), device='cpu')
    # official names go through the weights cache as in every tool (no downloads in tests)
    with pytest.raises(CheckpointError, match=r'inline://swin_t is not on this machine and '
                       'downloads are off'):
        Viewer(str(NANO), 'inline://swin_t', device='cpu')


def test_weights_file_and_the_kernel_at_the_border(tmp_path, detector):
    image = detector.read(str(photo(tmp_path / 'p.png')))
    views, cache = detector.attention(image, (5, 7), detector.default_choice)
    maps = views.maps
    corner = kernel_taps(detector.attention(image, (0, 0), detector.default_choice, None,
                                            cache)[0].maps)
    assert np.isnan(corner[0]).all() and np.isnan(corner[:, 0]).all()
    np.testing.assert_array_equal(corner[1:, 1:], maps.kernel.numpy()[1:, 1:])
    np.testing.assert_array_equal(kernel_taps(maps), maps.kernel.numpy())    # cell (2, 2)
    save_maps(str(tmp_path / 'w.npz'), maps, [(5, 7)], image.hw, (188, 256), 'x.attn')
    got = load_maps(str(tmp_path / 'w.npz'))
    assert got['inline'].dtype == np.float64 and got['inline'].shape == (1, *maps.grid)
    assert str(got['module']) == 'x.attn' and tuple(got['points'][0]) == (5, 7)
    np.testing.assert_array_equal(got['softmax'][0], maps.grid_map('softmax', 0).numpy())


def test_the_command_line_says_what_is_wrong(tmp_path, monkeypatch):
    import socket
    from inline_mm.app.__main__ import main
    # a wrong path and a busy port are said before gradio loads (here: it cannot)
    monkeypatch.setitem(sys.modules, 'inline_mm.app.ui', None)
    with pytest.raises(SystemExit, match="^inline_mm.app: error: config not found: '"):
        main([str(tmp_path / 'none.py')])
    with socket.socket() as busy:
        busy.bind(('127.0.0.1', 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(SystemExit, match=rf'port {port} on 127.0.0.1 is in use.*--port N'):
            main([str(NANO), '--port', str(port)])
    monkeypatch.undo()
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit, match=r'^inline_mm.app: error: --device cuda: this '
                           'machine has no CUDA GPU.*--device cpu'):
            main([str(NANO), '--device', 'cuda', '--port', str(free_port())])
    cfg = tmp_path / 'resnet.py'
    cfg.write_text("default_scope = 'mmdet'\nmodel = dict(backbone=dict(type='ResNet'))\n")
    with pytest.raises(SystemExit, match="its backbone 'ResNet' is not an InLine backbone"):
        main([str(cfg)])


def test_bf16_predictions_reach_the_page_in_fp32(tmp_path, detector, monkeypatch):
    """--precision bf16: the model predicts under bf16 autocast (its neck gives bf16), the
    page gets fp32 boxes and scores, and the attention maps are the fp32 app's, exactly (the
    same random weights; the maps never run under autocast)."""
    import inline_mm.env
    # bf16 units claimed, so that the path runs on any CPU (without them PyTorch emulates bf16)
    monkeypatch.setattr(inline_mm.env, '_cpu_flags', lambda: {'avx512f', 'avx512_bf16'})
    viewer = Viewer(str(NANO), device='cpu', precision='bf16')
    assert viewer.model_line().endswith('on cpu, in bf16 (autocast)')
    assert detector.model_line().endswith('on cpu')
    seen = []
    hook = viewer.model.neck.register_forward_hook(
        lambda module, args, out: seen.extend(o.dtype for o in out))
    image = viewer.read(str(photo(tmp_path / 'p.png')))
    try:
        pred = viewer.predict(image)
    finally:
        hook.remove()
    assert seen and set(seen) == {torch.bfloat16}
    assert pred.boxes.dtype == np.float32 and pred.scores.dtype == np.float32
    assert pred.boxes.shape == (len(pred.scores), 4) and pred.masks.shape[1:] == image.hw
    drawn, _, summary = viewer.draw(image, pred, 0.0)
    assert drawn.shape == (*image.hw, 3) and summary.startswith(f'{len(pred.scores)} of ')
    choice = viewer.default_choice
    mine = viewer.attention(image, (20, 30), choice)[0].maps
    theirs = detector.attention(image, (20, 30), choice)[0].maps
    for method, weights in theirs.weights.items():
        assert torch.equal(mine.weights[method], weights), method


def test_a_precision_the_device_cannot_run_is_refused_in_one_line(monkeypatch):
    import inline_mm.env
    from inline_mm.app.__main__ import main
    monkeypatch.setattr(inline_mm.env, '_cpu_flags', lambda: {'fpu', 'avx2', 'avx512f'})
    with pytest.raises(SystemExit) as e:
        main([str(NANO), '--device', 'cpu', '--precision', 'bf16', '--port', str(free_port())])
    message = str(e.value)
    assert message.startswith('inline_mm.app: error: --precision bf16 on cpu: no bf16 units '), \
        message
    assert 'emulated, slower than fp32; start with --precision fp32' in message
    assert '\n' not in message
    with pytest.raises(SystemExit, match=r'^inline_mm.app: error: --precision fp16 runs on CUDA '
                       r'only \(the device is cpu\); on a CPU use --precision bf16'):
        main([str(NANO), '--device', 'cpu', '--precision', 'fp16', '--port', str(free_port())])
    with pytest.raises(ValueError, match="--precision 'fp8': choose one of fp32, bf16, fp16"):
        Viewer(str(NANO), device='cpu', precision='fp8')


# ------------------------------------------------------------------ in a real browser
#: run in the app's process before it starts: every connection or name look-up that leaves
#: 127.0.0.1 is written to the file named by argv[1] (Python's audit events)
WATCH = textwrap.dedent('''
    import runpy, sys
    log = sys.argv.pop(1)
    LOCAL = ('127.0.0.1', 'localhost', '::1', '0.0.0.0', None)

    def watch(event, args):
        host = None
        if event == 'socket.connect' and isinstance(args[1], tuple):
            host = args[1][0]
        elif event == 'socket.getaddrinfo':
            host = args[0]
        else:
            return
        if isinstance(host, bytes):
            host = host.decode()
        if host not in LOCAL and not str(host).startswith('127.'):
            with open(log, 'a') as f:
                f.write(f'{event} {host!r}\\n')

    sys.addaudithook(watch)
    sys.argv[0] = 'inline_mm.app'
    runpy.run_module('inline_mm.app', run_name='__main__', alter_sys=True)
''')


def _wait_for_page(url: str, proc, log: Path, timeout: float = 180):
    start = time.time()
    while time.time() - start < timeout:
        if proc.poll() is not None:
            pytest.fail(f'the app exited ({proc.returncode}):\n{log.read_text()[-3000:]}')
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f'the app did not answer within {timeout}s:\n{log.read_text()[-3000:]}')


def _wait_for_message(page, text: str):
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    try:
        page.wait_for_function(
            'text => document.querySelector("#message").innerText.includes(text)',
            arg=text, timeout=60_000)
    except PlaywrightTimeout:
        pytest.fail(f'the page did not say {text!r} within 60 s; it says: '
                    f'{page.locator("#message").inner_text()!r}')


def _fetch(page, url: str) -> bytes:
    response = page.request.get(url)
    assert response.ok, url
    return response.body()


def _click_and_read(page, point, base: str):
    """Click near pixel ``point`` of the predictions; wait for its maps; return the pixel the
    page took, the views (PNG bytes per method) and the weights file's arrays."""
    img = page.locator('#predictions img')
    before = [page.locator(f'#{k} input').input_value() for k in 'xy']
    scale = img.bounding_box()['width'] / img.evaluate('e => e.naturalWidth')
    img.click(position={'x': point[0] * scale, 'y': point[1] * scale})
    page.wait_for_function(   # the query's pixel comes back into the x and y fields
        'before => ["x", "y"].some((k, i) => '
        'document.querySelector(`#${k} input`).value !== before[i])', arg=before,
        timeout=120_000)
    x, y = (int(float(page.locator(f'#{k} input').input_value())) for k in 'xy')
    assert abs(x - point[0]) <= 1 and abs(y - point[1]) <= 1, (x, y, point)
    link = page.locator(f'#weights a[href*="_{x}_{y}_"]')
    link.first.wait_for(timeout=30_000)
    views = {}
    for m in ('inline', 'linear', 'softmax', 'kernel'):
        src = page.locator(f'#view-{m} img').get_attribute('src')
        views[m] = _fetch(page, src if src.startswith('http') else base + src)
    href = link.first.get_attribute('href')
    data = _fetch(page, href if href.startswith('http') else base + href)
    with np.load(io.BytesIO(data), allow_pickle=False) as f:
        arrays = {k: f[k] for k in f.files}
    return (x, y), views, arrays


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_app_in_a_real_browser(tmp_path, detector):
    if not Path(CHROMIUM).is_file():
        pytest.skip("Debian's chromium is not installed (make setup-browser installs it)")
    from playwright.sync_api import sync_playwright
    # A checkpoint of the demo's detector (random weights): the app and the maps tool load
    # the same backbone from it.
    ckpt = tmp_path / 'nano.pth'
    torch.save({'meta': {'dataset_meta': detector.model.dataset_meta},
                'state_dict': detector.model.state_dict()}, ckpt)
    image = photo(tmp_path / 'photo.png')
    port = free_port()
    base = f'http://127.0.0.1:{port}'
    outbound, log = tmp_path / 'outbound.txt', tmp_path / 'app.log'
    with open(log, 'w') as out:
        proc = subprocess.Popen(
            [sys.executable, '-c', WATCH, str(outbound), str(NANO), str(ckpt), '--port',
             str(port), '--score-thr', '0', '--device', 'cpu'],
            stdout=out, stderr=subprocess.STDOUT, env=subprocess_env(), cwd=ROOT)
    requests = []
    try:
        _wait_for_page(base + '/', proc, log)
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=CHROMIUM, headless=True,
                args=['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
                      '--disable-background-networking', '--disable-component-update',
                      '--disable-sync'])
            page = browser.new_page(viewport={'width': 1400, 'height': 1100})
            page.on('request', lambda r: requests.append(r.url))
            page.goto(base + '/')
            assert '(the whole model)' in page.locator('#model').inner_text()
            upload = page.locator('#image input[type=file]')
            # not an image: a message, and the page goes on
            bad = tmp_path / 'notes.png'
            bad.write_text('not an image')
            upload.set_input_files(str(bad))
            page.wait_for_function('() => document.querySelector("#message").innerText'
                                   '.includes("is not an image")', timeout=60_000)
            # a bundled sample
            page.locator('#samples img').first.click()
            page.wait_for_function('() => document.querySelector("#message").innerText'
                                   '.includes("toy_shapes.jpg, 256x256: ")', timeout=120_000)
            upload.set_input_files(str(image))
            page.wait_for_function('() => document.querySelector("#message").innerText'
                                   '.includes("photo.png")', timeout=120_000)
            message = page.locator('#message').inner_text()
            assert 'photo.png, 150x110: 100 of 100 detections at score >= 0.00' in message, \
                message
            # the predictions come back at the image's size
            page.wait_for_function('() => { const i = document.querySelector("#predictions img");'
                                   ' return i && i.complete && i.naturalWidth === 150 && '
                                   'i.naturalHeight === 110 }', timeout=30_000)
            # the threshold redraws however it is set: a typed value, then the arrow keys
            drawn = page.locator('#predictions img').get_attribute('src')
            number = page.locator('#score input[type=number]')
            number.fill('0.5')
            number.press('Enter')
            _wait_for_message(page, 'detections at score >= 0.50')
            page.wait_for_function('src => document.querySelector("#predictions img").src '
                                   '!== src', arg=drawn, timeout=30_000)
            page.locator('#score input[type=range]').press('ArrowRight')
            _wait_for_message(page, 'detections at score >= 0.51')
            number.fill('0')
            number.press('Enter')
            _wait_for_message(page, '100 of 100 detections at score >= 0.00')
            results = [_click_and_read(page, pt, base) for pt in [(23, 31), (121, 84)]]
            points = [pt for pt, _, _ in results]
            for _, views, _ in results:
                for png in views.values():
                    assert png.startswith(b'\x89PNG')
                for m in ('inline', 'linear', 'softmax'):
                    with PILImage.open(io.BytesIO(views[m])) as im:
                        assert im.size == (150, 110)
            (_, a_views, a), (_, b_views, b) = results
            # each map's colour bar, white at the uniform weight 1/n, which the page explains
            assert 'white is the uniform weight 1/n' in page.locator('#scale-note').inner_text()
            for m in ('inline', 'linear', 'softmax'):
                bar = page.locator(f'#bar-{m} .colour-bar')
                assert bar.is_visible()
                uniform = float(bar.get_attribute('data-uniform'))
                assert uniform == pytest.approx(1 / (47 * 64), rel=1e-9)
                assert '1/n = ' in bar.inner_text()
                lo, hi = (float(bar.get_attribute(f'data-{k}')) for k in ('lo', 'hi'))
                assert hi - uniform == pytest.approx(uniform - lo, rel=1e-9)
                assert hi - uniform == pytest.approx(
                    np.abs(b[m][0] - uniform).max(), rel=1e-6)        # the last click's map
                mark = page.locator(f'#bar-{m} .uniform').bounding_box()
                box = page.locator(f'#bar-{m} .bar').bounding_box()
                assert abs(mark['x'] + mark['width'] / 2 - (box['x'] + box['width'] / 2)) <= 2
            assert a_views['inline'] != b_views['inline']
            assert not np.array_equal(a['inline'], b['inline'])
            assert [tuple(r['points'][0]) for _, _, r in results] == points
            # a Softmax block: the page says why there is no map
            page.locator('#block input').click()
            page.get_by_role('option', name='stage 3 block 0 (Softmax)').click()
            page.wait_for_function('() => document.querySelector("#message").innerText'
                                   '.includes("is a Softmax block")', timeout=60_000)
            SCREENSHOT.parent.mkdir(exist_ok=True)
            page.locator('#block input').click()
            page.get_by_role('option', name='stage 0 block 0 (InLine)').click()
            _wait_for_message(page, 'used again')
            page.screenshot(path=str(SCREENSHOT), full_page=True)
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    # a quiet start: one line naming the model, its weights and the address; no warnings
    lines = log.read_text().splitlines()
    assert lines[0] == (f'inline_mm.app: {NANO.name}: detection with InLineSwin, a size of its '
                        'own (the config sets its widths and depths: not a released model), on '
                        f'cpu; weights nano.pth (the whole model); open {base}'), lines
    assert not [line for line in lines if 'arning' in line or 'share' in line], lines
    # the page loaded nothing from outside, and the server reached nothing outside
    hosts = {r.split('/')[2] for r in requests if r.startswith('http')}
    assert hosts == {f'127.0.0.1:{port}'}, hosts
    assert all(r.startswith((base, 'data:', 'blob:')) for r in requests), \
        [r for r in requests if not r.startswith((base, 'data:', 'blob:'))]
    assert not outbound.exists(), outbound.read_text()
    # the maps equal the maps tool's for the same points
    res = subprocess.run(
        [sys.executable, 'tools/attention_map.py', '--config', str(NANO), '--checkpoint',
         str(ckpt), '--image', str(image), '--points', *[f'{x},{y}' for x, y in points],
         '--out', str(tmp_path / 'figure.png'), '--npz', str(tmp_path / 'tool.npz'), '--json'],
        capture_output=True, text=True, env=subprocess_env(), cwd=ROOT, timeout=180)
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads(res.stdout.strip().splitlines()[-1])['module'] == 'layers.0.blocks.0.attn'
    tool = load_maps(str(tmp_path / 'tool.npz'))
    # (to float64's last bits: two processes may sum in other orders)
    for i, (_, _, arrays) in enumerate(results):
        for key in ('inline', 'linear', 'softmax'):
            np.testing.assert_allclose(arrays[key][0], tool[key][i], rtol=1e-12, atol=0,
                                       err_msg=key)
        np.testing.assert_array_equal(arrays['cells'][0], tool['cells'][i])
        np.testing.assert_allclose(arrays['kernel'], tool['kernel'], rtol=1e-12, atol=0)
    assert SCREENSHOT.is_file()
