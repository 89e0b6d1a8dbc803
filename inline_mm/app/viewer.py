"""What the app does, without the web page: a detector or segmentor of a config with its
weights, an image read with clear refusals, its predictions drawn, and the attention views
of a point. :mod:`inline_mm.app.ui` puts a Gradio page on it; the tests drive it directly.
"""
import contextlib
import copy
import hashlib
import html
import os
import tempfile
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch

from ..visualization.attention_maps import (METHODS, AttentionSiteError, Capture, Preprocess,
                                            attention_maps, attention_sites, capture_attention,
                                            find_attention, map_stride, point_to_cell,
                                            prepare_image, to_rgb)
from ..visualization.attention_views import (colour_over, kernel_picture, map_at_image_size,
                                             map_scale, mark_point, method_label, save_maps)

__all__ = ['AppError', 'Image', 'BlockChoice', 'Prediction', 'AttentionViews', 'Viewer',
           'read_image', 'DEFAULT_MAX_SIDE', 'MIN_SIDE', 'DEFAULT_SCORE_THR', 'DEFAULT_CONCURRENCY',
           'PRECISIONS']

#: the longest side the app keeps; larger images are downscaled to it (``--max-side``)
DEFAULT_MAX_SIDE = 2048
#: the shortest side the backbones take (their last stage has stride 32)
MIN_SIDE = 32
#: the score slider's start (mmdet's ``DetInferencer`` draws from 0.3 too)
DEFAULT_SCORE_THR = 0.3
#: model requests the page runs at once over all users (``--concurrency``): each records
#: its own attention (``record_calls``), so they may overlap; 4 users on 2 CPU cores wait
#: least in ratio to one user alone so (``benchmarks/app_users.py``)
DEFAULT_CONCURRENCY = 4
#: what the model's predictions run in (``--precision``): fp32, or autocast to bf16 or fp16
#: with the weights left in fp32 (casting them to bf16 once as well gained nothing measurable
#: on the demo's detector: docs/dev/training_at_scale.md, "The app's precision")
PRECISIONS = {'fp32': None, 'bf16': torch.bfloat16, 'fp16': torch.float16}


class AppError(ValueError):
    """Input the app cannot use; the message says what is wrong and what to do."""


# --------------------------------------------------------------------------- images
@dataclass
class Image:
    """An image as the app holds it.

    Attributes:
        pixels (ndarray): ``(H, W, 3)`` uint8 RGB: what the model and the maps see.
        name (str): The file's name.
        key (str): A hash of the pixels (a capture is reused while it is the same).
        notes (list[str]): What was done to it (downscaled).
        original_hw (tuple[int, int]): The file's size before any downscaling.
    """

    pixels: np.ndarray
    name: str
    key: str
    notes: List[str] = field(default_factory=list)
    original_hw: Tuple[int, int] = (0, 0)

    @property
    def hw(self) -> Tuple[int, int]:
        return tuple(self.pixels.shape[:2])


def read_image(path: str, name: Optional[str] = None,
               max_side: int = DEFAULT_MAX_SIDE) -> Image:
    """Read an image file as RGB (as ``tools/attention_map.py`` reads it: transparent
    pixels over white, :func:`~inline_mm.visualization.attention_maps.to_rgb`), downscaled so that
    its longer side is at most ``max_side`` (with a note saying so).

    Raises:
        AppError: not a file, not an image, too many pixels to decode, or a side shorter
            than :data:`MIN_SIDE`. Messages name the file by ``name``, never by its path.
    """
    from PIL import Image as PILImage
    from PIL import UnidentifiedImageError
    name = name or os.path.basename(str(path))
    if not path or not os.path.isfile(path):
        raise AppError(f'{name}: no such file; upload an image (PNG, JPEG, ...)')
    try:
        with PILImage.open(path) as im:
            w, h = im.size
            if min(w, h) < MIN_SIDE:
                raise AppError(f'{name} is {w}x{h} pixels: too small; the backbone needs at '
                               f'least {MIN_SIDE} pixels a side (its last stage has stride '
                               '32); use a larger image')
            notes = []
            if max(w, h) > max_side:
                f = max_side / max(w, h)
                size = (max(1, round(w * f)), max(1, round(h * f)))
                im.draft('RGB', size)               # JPEG: decode at a reduced scale
                im = to_rgb(im).resize(size, PILImage.BILINEAR)
                notes.append(f'{name} is {w}x{h} pixels: downscaled to {size[0]}x{size[1]} '
                             f'(the app keeps at most {max_side} pixels a side; start it '
                             'with --max-side to change that)')
            pixels = np.asarray(to_rgb(im))
    except AppError:
        raise
    except PILImage.DecompressionBombError as e:
        raise AppError(f'{name} has too many pixels to decode safely '
                       f'({str(e).replace(str(path), name)}); downscale it first') from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as e:
        raise AppError(f'{name} is not an image that can be read ({type(e).__name__}: '
                       f'{str(e).replace(str(path), name)}); upload a PNG, JPEG, BMP, TIFF or '
                       'WebP file') from None
    key = hashlib.sha1(pixels.tobytes() + repr(pixels.shape).encode()).hexdigest()
    return Image(pixels, name, key, notes, (h, w))


# --------------------------------------------------------------------------- blocks
@dataclass(frozen=True)
class BlockChoice:
    """One attention of the backbone a user can pick.

    Attributes:
        stage, block, branch (int): Where it is (branch: InLine-CSwin's two InLine halves).
        label (str): How the page names it.
        why_not (str): Empty for a global InLine attention (it has maps); else why not.
        heads (int): Its heads (0 for a Softmax block).
    """

    stage: int
    block: int
    branch: int
    label: str
    why_not: str
    heads: int


def block_choices(backbone: torch.nn.Module) -> List[BlockChoice]:
    """Every block of ``backbone`` (each InLine branch of an InLine-CSwin block apart), with
    why a Softmax or windowed block has no global map."""
    choices = []
    for site in attention_sites(backbone):
        where = f'stage {site.stage} block {site.block}'
        if not site.inline:
            choices.append(BlockChoice(site.stage, site.block, 0, f'{where} (Softmax)',
                                       f'{where} is a Softmax block: it attends within '
                                       'windows (or stripes) by Softmax, not with InLine over '
                                       'the whole image, so it has no global InLine map; '
                                       'pick an InLine block', 0))
            continue
        for branch in range(len(site.inline)):
            _, attn = find_attention(backbone, site.stage, site.block, branch)
            label = where + (f' branch {branch}' if len(site.inline) > 1 else '')
            window = getattr(attn, 'window_size', None)
            if window is not None:
                choices.append(BlockChoice(
                    site.stage, site.block, branch, f'{label} (InLine, {window}x{window} windows)',
                    f'{label} is an InLine block that attends within {window}x{window} windows '
                    "(the config's inline_cfg window_size): each window has its own weights, "
                    'so there is no map over the whole image; pick a global InLine block',
                    attn.num_heads))
            else:
                choices.append(BlockChoice(site.stage, site.block, branch, f'{label} (InLine)',
                                           '', attn.num_heads))
    return choices


# --------------------------------------------------------------------------- results
@dataclass
class Prediction:
    """A model's output on one image, in the image's pixels.

    Attributes:
        kind (str): ``'detection'`` or ``'segmentation'``.
        boxes (ndarray): ``(N, 4)`` float32 x1, y1, x2, y2 (detection), whatever the
            precision the model ran in.
        scores (ndarray): ``(N,)`` float32 (detection).
        labels (ndarray): ``(N,)`` class indices (detection).
        masks (ndarray, optional): ``(N, H, W)`` bool (a detector with a mask head).
        seg (ndarray, optional): ``(H, W)`` class indices (segmentation).
    """

    kind: str
    boxes: np.ndarray = None
    scores: np.ndarray = None
    labels: np.ndarray = None
    masks: Optional[np.ndarray] = None
    seg: Optional[np.ndarray] = None


@dataclass
class AttentionViews:
    """What the page shows for one query.

    Attributes:
        images (dict[str, ndarray]): Per method of ``METHODS``, the map coloured over the
            image, at the image's size, the query marked.
        labels (dict[str, str]): Per method, what it is (``attention_views.method_label``).
        captions (dict[str, str]): Per method, its label and value range.
        kernel (ndarray): The local kernel's picture.
        weights_file (str): The ``.npz`` of the exact weights (``attention_views.save_maps``).
        summary (str): Which token of which block, and the grid.
        point (tuple[int, int]): The query's pixel.
        cell (tuple[int, int]): Its token.
        maps: The :class:`~inline_mm.visualization.attention_maps.AttentionMaps`.
        reused (bool): Whether the backbone's attention from an earlier click (same image,
            same block) was used again instead of running the backbone.
        scales (dict[str, tuple[float, float]]): Per method, its colour scale ``(lo, hi)``
            (``attention_views.map_scale``: the uniform weight in the middle, white).
        uniform (float): The uniform weight 1/n over the image's ``n`` tokens.
    """

    images: Dict[str, np.ndarray]
    labels: Dict[str, str]
    captions: Dict[str, str]
    kernel: np.ndarray
    weights_file: str
    summary: str
    point: Tuple[int, int]
    cell: Tuple[int, int]
    maps: object
    reused: bool
    scales: Dict[str, Tuple[float, float]] = field(default_factory=dict)
    uniform: float = 0.0


@dataclass
class _Captured:
    key: tuple
    capture: Capture
    resized_hw: Tuple[int, int]


# --------------------------------------------------------------------------- the model
class Viewer:
    """A detector or segmentor of an mmdet / mmseg config with an InLine backbone.

    Args:
        config (str): The config file.
        checkpoint (str, optional): A trained mm checkpoint of the config's model (all of
            it is loaded), or backbone weights (an official ImageNet file, a converted file,
            ``inline://<name>``: the backbone is loaded, the rest stays random). None: random
            weights (seed ``seed``), and the page says so.
        device (str, optional): ``'cpu'``, ``'cuda'``, ... Default: CUDA where there is one.
        seed (int): The random weights' seed. Default: 0.
        max_side (int): Longer image sides are downscaled to this.
        out_dir (str, optional): Where the weight files go (default: a new temporary folder).
        precision (str): What the predictions run in (:data:`PRECISIONS`): ``'fp32'``, or
            ``'bf16'`` / ``'fp16'`` autocast (weights stay fp32; the predictions come back
            in fp32). fp16 on CUDA only; bf16 only where the device computes it
            (:func:`inline_mm.env.bf16_support`: a CPU without bf16 units emulates it, slower
            than fp32). The attention maps are computed in fp32 whatever this is: they are
            the exact weights. Default: ``'fp32'``.
    """

    def __init__(self, config: str, checkpoint: Optional[str] = None,
                 device: Optional[str] = None, seed: int = 0,
                 max_side: int = DEFAULT_MAX_SIDE, out_dir: Optional[str] = None,
                 precision: str = 'fp32'):
        from ..apis import SCOPES, init_model, read_config
        from ..engine import install
        from ..models.families import FAMILIES
        # the engine rows on, as in every tool: among them fp32_predictions, which hands the
        # page fp32 boxes and scores from a bf16 / fp16 model (--precision)
        install()
        cfg = read_config(config)
        self.kind = SCOPES.get(cfg.get('default_scope'))
        if self.kind is None:
            raise ValueError(f'{config}: default_scope {cfg.get("default_scope")!r}: the app '
                             'takes mmdet (detection) and mmseg (segmentation) configs')
        backbone = cfg.model.get('backbone', {}).get('type')
        if backbone not in FAMILIES:
            raise ValueError(f'{config}: its backbone {backbone!r} is not an InLine backbone '
                             f'({", ".join(FAMILIES)})')
        self.config, self.checkpoint, self.seed, self.max_side = config, checkpoint, seed, max_side
        self.device = _check_device(device)
        self.precision = _check_precision(precision, self.device)
        self.cfg = cfg
        # seeded random weights under what the checkpoint does not hold
        self.model = init_model(copy.deepcopy(cfg), checkpoint, self.device,
                                backbone_weights=True, seed=seed, init_weights=True)
        self.weights_note, self.weights_line = self._describe_weights(self.model.weights)
        self.random = self.model.weights == 'random'
        self.model_score_thr = self._keep_every_score() if self.kind == 'detection' else None
        self.backbone = self.model.backbone
        self.preprocess = Preprocess.from_config(cfg)
        self.choices = block_choices(self.backbone)
        self.classes = tuple(self.model.dataset_meta.get('classes') or ())
        self.palette = _palette(self.model.dataset_meta.get('palette'), self._num_classes())
        self.out_dir = out_dir or tempfile.mkdtemp(prefix='inline_mm_app_')
        os.makedirs(self.out_dir, exist_ok=True)

    def _describe_weights(self, weights: str) -> Tuple[str, str]:
        """What the page and the start line say the model holds."""
        if weights == 'random':
            return (f'**random weights** (seed {self.seed}; no checkpoint given): the '
                    'predictions and maps show the mechanics only, not what a trained model '
                    'sees'), f'random weights (seed {self.seed})'
        shown = _shown(self.checkpoint)
        if weights == 'whole':
            return f'weights: `{shown}` (the whole model)', f'weights {shown} (the whole model)'
        return (f'backbone weights: `{shown}`; the rest of the model is **random** (an ImageNet '
                "backbone, no trained head): the predictions mean nothing, the maps are the "
                "backbone's"), f'backbone weights {shown}, the rest random (seed {self.seed})'

    def _num_classes(self) -> int:
        if self.kind == 'segmentation':
            return int(self.model.decode_head.num_classes)
        return max(len(self.classes), 1)

    def _keep_every_score(self) -> Optional[float]:
        """Make the detector keep predictions of any score (the page's slider filters them)
        and return the score threshold of its config (None where it has none)."""
        model = self.model
        test_cfg = getattr(model, 'test_cfg', None) or {}
        found = [test_cfg, test_cfg.get('rcnn')]
        for head in ('roi_head', 'bbox_head'):
            found.append(getattr(getattr(model, head, None), 'test_cfg', None))
        old, seen = None, set()
        for holder in found:
            if holder is None or id(holder) in seen or 'score_thr' not in holder:
                continue
            seen.add(id(holder))
            old = holder['score_thr'] if old is None else old
            holder['score_thr'] = 0.0
        return old

    # ------------------------------------------------------------------ reading
    def read(self, path: str, name: Optional[str] = None) -> Image:
        """:func:`read_image`, refusing an image the backbone cannot take after the
        config's resize."""
        image = read_image(path, name, self.max_side)
        resized = self.preprocess.resized_size(image.hw)
        if min(resized) < MIN_SIDE:
            h, w = image.hw
            raise AppError(f'{image.name} ({w}x{h} pixels) is too small for the backbone: the '
                           f"config's test resize makes it {resized[1]}x{resized[0]}, and the "
                           f'backbone needs at least {MIN_SIDE} pixels a side (its last stage '
                           'has stride 32); use a larger, less elongated image')
        return image

    # ------------------------------------------------------------------ predictions
    def predict(self, image: Image) -> Prediction:
        """The model's predictions on ``image`` (its test pipeline, from the pixels)."""
        bgr = np.ascontiguousarray(image.pixels[..., ::-1])
        with torch.no_grad(), self._autocast():
            if self.kind == 'detection':
                from mmdet.apis import inference_detector
                inst = inference_detector(self.model, bgr).pred_instances.cpu()
                masks = inst.masks.numpy().astype(bool) if 'masks' in inst else None
                return Prediction('detection', inst.bboxes.numpy(), inst.scores.numpy(),
                                  inst.labels.numpy(), masks)
            from mmseg.apis import inference_model
            seg = inference_model(self.model, bgr).pred_sem_seg.data[0].cpu().numpy()
            return Prediction('segmentation', seg=seg)

    def _autocast(self):
        """The predictions' precision: autocast to :attr:`precision`, or nothing (fp32)."""
        dtype = PRECISIONS[self.precision]
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(torch.device(self.device).type, dtype)

    def class_name(self, label: int) -> str:
        return self.classes[label] if 0 <= label < len(self.classes) else f'class {label}'

    def draw(self, image: Image, pred: Prediction, score_thr: float = DEFAULT_SCORE_THR,
             point: Optional[Tuple[float, float]] = None) -> Tuple[np.ndarray, str, str]:
        """The predictions drawn on the image; a legend (HTML); a one-line summary."""
        if pred.kind == 'segmentation':
            out, legend, summary = self._draw_segmentation(image, pred)
        else:
            out, legend, summary = self._draw_detection(image, pred, score_thr)
        return (out if point is None else mark_point(out, point)), legend, summary

    def _draw_detection(self, image: Image, pred: Prediction, score_thr: float):
        from PIL import Image as PILImage
        from PIL import ImageDraw, ImageFont
        keep = np.flatnonzero(pred.scores >= score_thr)
        keep = keep[np.argsort(-pred.scores[keep], kind='stable')]
        out = image.pixels.astype(np.float64)
        if pred.masks is not None:
            for i in keep[::-1]:            # the highest score on top
                m = pred.masks[i]
                out[m] = 0.5 * out[m] + 0.5 * np.asarray(self.palette[pred.labels[i]])
        im = PILImage.fromarray(np.clip(out + 0.5, 0, 255).astype(np.uint8))
        draw = ImageDraw.Draw(im)
        h, w = image.hw
        width = max(1, round(min(h, w) / 250))
        font = ImageFont.load_default(size=max(10, round(min(h, w) / 40)))
        for i in keep[::-1]:
            colour = tuple(int(c) for c in self.palette[pred.labels[i]])
            x1, y1, x2, y2 = (float(v) for v in pred.boxes[i])
            draw.rectangle((x1, y1, x2, y2), outline=colour, width=width)
            text = f'{self.class_name(int(pred.labels[i]))} {pred.scores[i]:.2f}'
            left, top, right, bottom = draw.textbbox((x1, y1), text, font=font)
            ty = y1 - (bottom - top) - 2 if y1 - (bottom - top) - 2 >= 0 else y1
            box = draw.textbbox((x1, ty), text, font=font)
            draw.rectangle((box[0] - 1, box[1] - 1, box[2] + 1, box[3] + 1), fill=colour)
            draw.text((x1, ty), text, font=font,
                      fill=(0, 0, 0) if sum(colour) > 382 else (255, 255, 255))
        n = len(pred.scores)
        top = f'; highest score {pred.scores.max():.3f}' if n else ''
        summary = (f'{len(keep)} of {n} detections at score >= {score_thr:.2f}{top}'
                   + ('' if pred.masks is None else ', with masks'))
        counts: Dict[int, int] = {}
        for i in keep:
            counts[int(pred.labels[i])] = counts.get(int(pred.labels[i]), 0) + 1
        rows = [(self.palette[c], self.class_name(c), f'{k}') for c, k in
                sorted(counts.items(), key=lambda kv: -kv[1])]
        return np.asarray(im), _legend(rows, 'detections'), summary

    def _draw_segmentation(self, image: Image, pred: Prediction):
        seg = pred.seg
        colours = np.asarray(self.palette, dtype=np.float64)
        valid = (seg >= 0) & (seg < len(colours))
        out = image.pixels.astype(np.float64)
        out[valid] = 0.5 * out[valid] + 0.5 * colours[seg[valid]]
        labels, counts = np.unique(seg[valid], return_counts=True)
        order = np.argsort(-counts, kind='stable')
        total = seg.size
        rows = [(self.palette[labels[i]], self.class_name(int(labels[i])),
                 f'{100 * counts[i] / total:.1f}%') for i in order]
        summary = f'{len(labels)} classes in the image'
        return (np.clip(out + 0.5, 0, 255).astype(np.uint8), _legend(rows, 'share of pixels'),
                summary)

    # ------------------------------------------------------------------ attention
    def choice(self, label: str) -> BlockChoice:
        for c in self.choices:
            if c.label == label:
                return c
        raise AppError(f'no block {label!r}; pick one of the list')

    @property
    def default_choice(self) -> Optional[BlockChoice]:
        return next((c for c in self.choices if not c.why_not), None)

    def attention(self, image: Image, point: Tuple[float, float], choice: BlockChoice,
                  head: Optional[int] = None,
                  cache: Optional[_Captured] = None) -> Tuple[AttentionViews, _Captured]:
        """The views of the query at pixel ``point`` (x, y) of ``image`` for the block
        ``choice``, head ``head`` (None: the mean over heads). ``cache``, what an earlier
        call returned, is reused for the same image and block.

        Raises:
            AppError: a point outside the image, a block without a global map, no such head.
        """
        x, y = point
        h, w = image.hw
        if not (0 <= x < w and 0 <= y < h):
            raise AppError(f'the point ({x:g}, {y:g}) is outside the {w}x{h} image (x in '
                           f'0..{w - 1}, y in 0..{h - 1}); click on the image')
        if choice.why_not:
            raise AppError(choice.why_not)
        if head is not None and not 0 <= head < choice.heads:
            raise AppError(f'{choice.label} has {choice.heads} head'
                           f'{"s" if choice.heads != 1 else ""} (0..{choice.heads - 1}); pick '
                           'one of them or the mean over heads')
        key = _capture_key(image, choice)
        reused = self.reuses(cache, image, choice)
        if not reused:
            x_in, resized = prepare_image(image.pixels, self.preprocess)
            try:
                cap = capture_attention(self.backbone, x_in.to(self.device), choice.stage,
                                        choice.block, choice.branch, valid_sizes=[resized])
            except AttentionSiteError as e:
                raise AppError(str(e)) from None
            cache = _Captured(key, cap, resized)
        cap, resized = cache.capture, cache.resized_hw
        stride = map_stride(cap.input_hw, cap.hw)
        cell = point_to_cell((x, y), (h, w), resized, stride, cap.grid_of(0))
        maps = attention_maps(cap, [cell], head=head)
        images, captions, labels, scales = {}, {}, {}, {}
        uniform = 1.0 / maps.weights[METHODS[0]].shape[-1]          # 1/n over the n keys
        for method in METHODS:
            labels[method] = method_label(maps, method)
            grid = maps.grid_map(method, 0).detach().cpu().numpy()
            values = map_at_image_size(grid, (h, w), resized, stride)
            scales[method] = map_scale(grid, uniform)
            images[method] = colour_over(image.pixels, values, scales[method], (x, y))
            text = f'{labels[method]}: weights from {grid.min():.3g} to {grid.max():.3g}'
            if maps.prefix_tokens:
                text += f'; class token {float(maps.prefix(method, 0).sum()):.3g}'
            captions[method] = text
        kernel = kernel_picture(maps, 0)
        where = f'{choice.stage}-{choice.block}-{choice.branch}'
        path = os.path.join(self.out_dir, f'attention_{image.key[:8]}_{where}_{int(x)}_{int(y)}'
                            f'_{"mean" if head is None else head}.npz')
        # Written aside, then moved into place: two users asking for the same query at once
        # each write whole files, and the page only ever links a complete one.
        fd, part = tempfile.mkstemp(suffix='.npz', dir=self.out_dir)
        os.close(fd)
        save_maps(part, maps, [(x, y)], (h, w), resized, cap.path)
        os.replace(part, path)
        what = 'mean over heads' if head is None else f'head {head}'
        summary = (f'query ({x:g}, {y:g}): token (row {cell[0]}, column {cell[1]}) of the '
                   f'{maps.grid[0]}x{maps.grid[1]} tokens ({stride} pixels each on the '
                   f'{resized[1]}x{resized[0]} resized image) of `{cap.path}`, {what}')
        return AttentionViews(images, labels, captions, kernel, path, summary, (x, y), cell,
                              maps, reused, scales, uniform), cache

    @staticmethod
    def reuses(cache: Optional[_Captured], image: Image, choice: BlockChoice) -> bool:
        """Whether :meth:`attention` will reuse ``cache`` (same image, same block)."""
        return cache is not None and cache.key == _capture_key(image, choice)

    def describe(self) -> str:
        """The model in one paragraph (Markdown; files by their names, not their paths)."""
        return f'`{os.path.basename(self.config)}`: {self.model_line()}; {self.weights_note}'

    def model_line(self) -> str:
        """What runs, in words: ``detection with InLineSwin, the tiny size, on cpu`` (and
        ``, in bf16 (autocast)`` where the predictions do not run in fp32)."""
        fam = type(self.backbone).__name__
        arch = getattr(self.backbone, 'arch_name', '')
        size = ('a size of its own (the config sets its widths and depths: not a released '
                'model)') if arch == 'custom' else f'the {arch} size'
        amp = '' if self.precision == 'fp32' else f', in {self.precision} (autocast)'
        return f'{self.kind} with {fam}, {size}, on {self.device}{amp}'


def _shown(checkpoint: str) -> str:
    """A checkpoint as the page names it: its file name, or an ``inline://`` name."""
    return checkpoint if '://' in checkpoint else os.path.basename(checkpoint)


def _check_device(device: Optional[str]) -> str:
    """``device`` checked (``ValueError`` in one line if this machine has no such device);
    None: CUDA where there is a GPU, else the CPU."""
    if device is None:
        return 'cuda' if torch.cuda.is_available() else 'cpu'
    try:
        kind = torch.device(device).type
    except RuntimeError:
        raise ValueError(f'--device {device!r} is not a device (cpu, cuda, cuda:1, ...)') \
            from None
    if kind == 'cuda' and not torch.cuda.is_available():
        raise ValueError(f'--device {device}: this machine has no CUDA GPU that torch can use; '
                         'start with --device cpu (or leave --device out)')
    return device


def _check_precision(precision: str, device: str) -> str:
    """``precision`` checked against ``device`` (``ValueError`` in one line, saying what to
    do, where the app cannot or should not run it there)."""
    if precision not in PRECISIONS:
        raise ValueError(f'--precision {precision!r}: choose one of {", ".join(PRECISIONS)}')
    kind = torch.device(device).type
    if precision == 'fp16' and kind != 'cuda':
        raise ValueError(f'--precision fp16 runs on CUDA only (the device is {device}); on a '
                         'CPU use --precision bf16 where it has bf16 units, else fp32')
    if precision == 'bf16':
        from ..env import bf16_support
        has_units, why = bf16_support(device)
        if not has_units:
            raise ValueError(f'--precision bf16 on {device}: {why}; start with --precision '
                             'fp32 (the default)')
    return precision


def _capture_key(image: Image, choice: BlockChoice) -> tuple:
    return image.key, choice.stage, choice.block, choice.branch


def _palette(palette, n: int) -> List[Tuple[int, int, int]]:
    """``n`` RGB colours: the dataset's where it has enough, else drawn (seeded)."""
    if isinstance(palette, (list, tuple)) and len(palette) >= n:
        return [tuple(int(c) for c in p) for p in palette]
    rng = np.random.default_rng(42)
    return [tuple(int(c) for c in rng.integers(40, 256, 3)) for _ in range(n)]


def _legend(rows, what: str) -> str:
    """An HTML table: a colour swatch, a class name, a figure."""
    if not rows:
        return '<p>nothing to show</p>'
    cells = ''.join(
        f'<tr><td><span style="display:inline-block;width:1em;height:1em;'
        f'background:rgb{tuple(int(c) for c in colour)}"></span></td>'
        f'<td>{html.escape(str(name))}</td><td>{html.escape(figure)}</td></tr>'
        for colour, name, figure in rows)
    return f'<table class="legend"><tr><th></th><th>class</th><th>{what}</th></tr>{cells}</table>'
