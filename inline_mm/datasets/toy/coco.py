"""A small, real COCO-format instance-segmentation dataset of shapes on textures.

``python tools/misc/make_toy_dataset.py coco OUT`` writes::

    OUT/train2017/000000.jpg ...            JPEG images
    OUT/val2017/000000.jpg ...
    OUT/annotations/instances_train2017.json
    OUT/annotations/instances_val2017.json

the layout of COCO itself, so mmdet's stock ``CocoDataset``/``CocoMetric`` read it
with only ``data_root`` and ``metainfo`` changed.  Each image has a random textured
background (smooth noise, stripes or a checkerboard, plus pixel noise) and one to
``max_objects`` non-overlapping shapes of random colour, size and rotation.  The
class is the shape, never the colour.  Masks are stored the ways COCO stores them:
polygons for polygonal shapes (triangles, rectangles), compressed RLE for discs
and uncompressed RLE for rings (a ring has a hole, which a polygon cannot hold),
so a dataset exercises every mask decoding path of the loaders and the metric.
Everything is drawn from one seed: the same arguments give the same files (with the same
numpy / OpenCV); ``OUT/toy_dataset.json`` records the generator, the arguments and a hash
of the files (:mod:`inline_mm.datasets.toy`), so a reader can tell data of another generator.
"""
import argparse
import json
import math
import os
import os.path as osp
from typing import Dict, List, Sequence

import cv2
import numpy as np
from pycocotools import mask as mask_utils

from . import STAMP_FILE, expected_stamp, write_stamp

__all__ = ['SHAPES', 'DEFAULT_CLASSES', 'KIND_HELP', 'add_arguments', 'run', 'make_coco_toy',
           'coco_toy_stamp']

#: every shape the generator can draw, with the mask encoding it is stored in
SHAPES = {'circle': 'rle', 'triangle': 'polygon', 'rectangle': 'polygon',
          'ring': 'uncompressed_rle'}
DEFAULT_CLASSES = ('circle', 'triangle', 'rectangle')

KIND_HELP = {'coco': 'COCO instance segmentation: shapes on textured backgrounds '
                     '(polygon and RLE masks, train2017/val2017 splits)'}


# --------------------------------------------------------------------- drawing
def _texture(rng: np.random.Generator, h: int, w: int):
    """A random ``(h, w, 3)`` float background in [0, 255] and its mean colour.

    The pattern varies the base colour by at most ~60 levels per channel: visible
    texture that a detector must learn to ignore, not camouflage."""
    c0 = rng.uniform(30, 225, 3)
    c1 = np.clip(c0 + rng.uniform(-60, 60, 3), 0, 255)
    kind = rng.integers(3)
    if kind == 0:       # smooth noise: a coarse random grid, upsampled
        g = rng.uniform(0, 1, (int(rng.integers(3, 9)), int(rng.integers(3, 9))))
        t = cv2.resize(g.astype(np.float32), (w, h), interpolation=cv2.INTER_CUBIC)
        t = np.clip(t, 0, 1)
    else:
        yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
        period = rng.uniform(6, 28)
        if kind == 1:   # stripes at a random angle
            angle = rng.uniform(0, math.pi)
            u = xx * math.cos(angle) + yy * math.sin(angle)
            t = 0.5 + 0.5 * np.sin(2 * math.pi * u / period)
        else:           # checkerboard
            t = ((xx // period + yy // period) % 2).astype(np.float32)
    img = c0 * (1 - t[..., None]) + c1 * t[..., None]
    return img + rng.normal(0, 8, (h, w, 3)), (c0 + c1) / 2


def _object_colour(rng: np.random.Generator, background: np.ndarray) -> np.ndarray:
    """A random colour clearly apart from the background's (RGB distance >= 100)."""
    for _ in range(100):
        c = rng.uniform(0, 255, 3)
        if np.linalg.norm(c - background) >= 100:
            return c
    return 255 - background


def _shape_mask(rng: np.random.Generator, shape: str, cx: float, cy: float, r: float,
                h: int, w: int):
    """Binary mask of one shape and, for polygonal shapes, its vertices."""
    mask = np.zeros((h, w), np.uint8)
    poly = None
    if shape == 'circle':
        cv2.circle(mask, (round(cx), round(cy)), round(r), 1, -1)
    elif shape == 'ring':
        cv2.circle(mask, (round(cx), round(cy)), round(r), 1, -1)
        cv2.circle(mask, (round(cx), round(cy)), round(r * rng.uniform(0.4, 0.6)), 0, -1)
    else:
        if shape == 'triangle':
            angles = rng.uniform(0, 2 * math.pi) + np.array([0, 2, 4]) * math.pi / 3
            angles = angles + rng.uniform(-0.25, 0.25, 3)     # not always equilateral
            pts = np.stack([cx + r * np.cos(angles), cy + r * np.sin(angles)], 1)
        elif shape == 'rectangle':
            aspect = rng.uniform(0.5, 1.0)
            half = np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]]) * [r * 0.8, r * 0.8 * aspect]
            a = rng.uniform(0, math.pi)
            rot = np.array([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]])
            pts = half @ rot.T + [cx, cy]
        else:
            raise ValueError(f'unknown shape {shape!r}; choose from {sorted(SHAPES)}')
        pts = np.clip(pts, 0, [w - 1, h - 1])
        cv2.fillPoly(mask, [np.round(pts).astype(np.int32)], 1)
        poly = [float(v) for v in np.round(pts, 2).flatten()]
    return mask, poly


def _uncompressed_rle(mask: np.ndarray) -> dict:
    """COCO uncompressed RLE: run lengths over the column-major pixels, zeros first."""
    flat = mask.flatten(order='F').astype(np.int8)
    change = np.flatnonzero(np.diff(flat)) + 1
    bounds = np.concatenate([[0], change, [flat.size]])
    counts = np.diff(bounds).tolist()
    if flat[0] == 1:
        counts = [0] + counts
    return {'size': [int(mask.shape[0]), int(mask.shape[1])], 'counts': counts}


def _encode(mask: np.ndarray, poly, encoding: str):
    if encoding == 'polygon':
        return [poly]
    if encoding == 'uncompressed_rle':
        return _uncompressed_rle(mask)
    rle = mask_utils.encode(np.asfortranarray(mask))
    return {'size': rle['size'], 'counts': rle['counts'].decode('ascii')}


def _draw_image(rng: np.random.Generator, size: int, classes: Sequence[str], max_objects: int):
    h = w = size
    img, background = _texture(rng, h, w)
    placed: List[tuple] = []
    anns = []
    for _ in range(int(rng.integers(1, max_objects + 1))):
        for _try in range(30):     # rejection sampling keeps shapes apart (no occlusion)
            r = rng.uniform(0.07, 0.2) * size
            cx, cy = rng.uniform(r, w - r), rng.uniform(r, h - r)
            if all(math.hypot(cx - px, cy - py) > r + pr + 4 for px, py, pr in placed):
                break
        else:
            continue
        placed.append((cx, cy, r))
        label = int(rng.integers(len(classes)))
        shape = classes[label]
        mask, poly = _shape_mask(rng, shape, cx, cy, r, h, w)
        if mask.sum() < 16:
            continue
        colour = _object_colour(rng, background)
        # A faint texture on the shape too, so that flat colour is not the cue.
        fill = colour + rng.normal(0, 12, (h, w, 3))
        img = np.where(mask[..., None].astype(bool), fill, img)
        segm = _encode(mask, poly, SHAPES[shape])
        # Area and box as pycocotools derives them from the stored segmentation (for
        # a polygon that differs by a pixel ring from the raster), so they agree.
        if isinstance(segm, dict) and isinstance(segm['counts'], str):
            rle = dict(segm, counts=segm['counts'].encode('ascii'))
        else:
            rle = mask_utils.frPyObjects(segm, h, w)
            rle = mask_utils.merge(rle) if isinstance(rle, list) else rle
        anns.append(dict(category_id=label + 1, segmentation=segm, iscrowd=0,
                         area=float(mask_utils.area(rle)),
                         bbox=[float(v) for v in mask_utils.toBbox(rle)]))
    return np.clip(img, 0, 255).astype(np.uint8), anns


# --------------------------------------------------------------------- writing
def _write_split(out: str, split: str, n: int, rng: np.random.Generator, size: int,
                 classes: Sequence[str], max_objects: int, quality: int,
                 written: List[str]) -> Dict[str, int]:
    img_dir = osp.join(out, f'{split}2017')
    os.makedirs(img_dir, exist_ok=True)
    images, annotations = [], []
    for i in range(n):
        img, anns = _draw_image(rng, size, classes, max_objects)
        name = f'{i:06d}.jpg'
        # cv2 writes BGR; the colours are random, so the channel order does not matter.
        if not cv2.imwrite(osp.join(img_dir, name), img, [cv2.IMWRITE_JPEG_QUALITY, quality]):
            raise OSError(f'could not write {osp.join(img_dir, name)}')
        written.append(f'{split}2017/{name}')
        images.append(dict(id=i + 1, file_name=name, width=size, height=size))
        for a in anns:
            a.update(id=len(annotations) + 1, image_id=i + 1)
            annotations.append(a)
    coco = dict(
        info=dict(description=f'inline_mm toy shapes ({split})', version='1.0'),
        licenses=[],
        images=images, annotations=annotations,
        categories=[dict(id=k + 1, name=c, supercategory='shape') for k, c in enumerate(classes)])
    os.makedirs(osp.join(out, 'annotations'), exist_ok=True)
    with open(osp.join(out, 'annotations', f'instances_{split}2017.json'), 'w') as f:
        json.dump(coco, f)
    written.append(f'annotations/instances_{split}2017.json')
    return dict(images=len(images), instances=len(annotations))


def coco_toy_stamp(num_train: int = 300, num_val: int = 60, size: int = 256,
                   classes: Sequence[str] = DEFAULT_CLASSES, max_objects: int = 4,
                   seed: int = 0, quality: int = 90) -> dict:
    """The stamp :func:`make_coco_toy` writes for these arguments (same defaults)."""
    return expected_stamp(__name__, dict(
        num_train=num_train, num_val=num_val, size=size, classes=list(classes),
        max_objects=max_objects, seed=seed, quality=quality))


def make_coco_toy(out: str, num_train: int = 300, num_val: int = 60, size: int = 256,
                  classes: Sequence[str] = DEFAULT_CLASSES, max_objects: int = 4,
                  seed: int = 0, quality: int = 90) -> dict:
    """Write the toy dataset under ``out`` and return a summary.

    Args:
        out (str): Output directory (created; existing files are overwritten).
        num_train (int): Training images. Default: 300.
        num_val (int): Validation images. Default: 60.
        size (int): Image side in pixels. Default: 256.
        classes (Sequence[str]): Shapes, one class each, from :data:`SHAPES`.
            Default: ``('circle', 'triangle', 'rectangle')``.
        max_objects (int): Most shapes per image (at least one). Default: 4.
        seed (int): Random seed. Default: 0.
        quality (int): JPEG quality. Default: 90.

    Returns:
        dict: ``classes``, ``root``, per split the image and instance counts, and
        ``content_sha256`` (the hash of the written files, also in the stamp).
    """
    classes = tuple(classes)
    unknown = [c for c in classes if c not in SHAPES]
    if unknown or not classes or len(set(classes)) != len(classes):
        raise ValueError(f'classes must be distinct names from {sorted(SHAPES)}, got '
                         f'{list(classes)}')
    if num_train < 1 or num_val < 1:
        raise ValueError(f'need at least one image per split, got num_train={num_train}, '
                         f'num_val={num_val}')
    if size < 32:
        raise ValueError(f'size must be >= 32 pixels, got {size}')
    if max_objects < 1:
        raise ValueError(f'max_objects must be >= 1, got {max_objects}')
    # Independent streams per split: changing num_train leaves val unchanged.
    train_rng, val_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    os.makedirs(out, exist_ok=True)
    if osp.exists(osp.join(out, STAMP_FILE)):
        os.remove(osp.join(out, STAMP_FILE))    # stale until the new files are complete
    summary = dict(root=out, classes=classes)
    written: List[str] = []
    for split, n, rng in (('train', num_train, train_rng), ('val', num_val, val_rng)):
        summary[split] = _write_split(out, split, n, rng, size, classes, max_objects, quality,
                                      written)
    write_stamp(out, coco_toy_stamp(num_train, num_val, size, classes, max_objects, seed,
                                    quality), written)
    with open(osp.join(out, STAMP_FILE)) as f:
        summary['content_sha256'] = json.load(f)['content_sha256']
    return summary


# --------------------------------------------------------------------- CLI
def add_arguments(parser: argparse.ArgumentParser, kind: str = 'coco'):
    parser.add_argument('--num-train', type=int, default=300, help='training images (300)')
    parser.add_argument('--num-val', type=int, default=60, help='validation images (60)')
    parser.add_argument('--size', type=int, default=256, help='image side in pixels (256)')
    parser.add_argument('--classes', default=','.join(DEFAULT_CLASSES),
                        help=f'comma-separated shapes from {",".join(SHAPES)} '
                             f'(default: {",".join(DEFAULT_CLASSES)})')
    parser.add_argument('--max-objects', type=int, default=4, help='most shapes per image (4)')
    parser.add_argument('--seed', type=int, default=0, help='random seed (0)')


def run(args: argparse.Namespace):
    classes = [c.strip() for c in args.classes.split(',') if c.strip()]
    try:
        s = make_coco_toy(args.out, args.num_train, args.num_val, args.size, classes,
                          args.max_objects, args.seed)
    except ValueError as e:
        raise SystemExit(f'error: {e}')
    print(f"wrote {s['root']}: classes {', '.join(s['classes'])}; "
          f"train {s['train']['images']} images / {s['train']['instances']} instances, "
          f"val {s['val']['images']} images / {s['val']['instances']} instances; "
          f"content sha256 {s['content_sha256'][:12]}")
