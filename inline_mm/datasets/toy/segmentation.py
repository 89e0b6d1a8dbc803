"""Small, real semantic-segmentation datasets of shapes on textures (no download).

``python tools/misc/make_toy_dataset.py ade OUT`` writes the ADE20K directory layout that
mmseg's stock ``ADE20KDataset`` and the ``*_ade20k-512x512`` configs read::

    OUT/images/training/ADE_train_00000001.jpg      JPEG images
    OUT/annotations/training/ADE_train_00000001.png label values 0..150
    OUT/images/validation/ADE_val_00000001.jpg
    OUT/annotations/validation/ADE_val_00000001.png

with ADE20K's label convention: 0 is "other / unlabelled" (a thin band around every
shape here) and value ``k`` is the ADE20K class ``k - 1`` (the configs use
``reduce_zero_label=True``).  Backgrounds are labelled 'wall', shapes 'tree'
(discs), 'person' (triangles) and 'car' (rectangles).

``python tools/misc/make_toy_dataset.py cityscapes OUT`` writes the Cityscapes layout that
mmseg's ``CityscapesDataset`` and the ``*_cityscapes-512x1024`` configs read::

    OUT/leftImg8bit/train/aachen/aachen_000000_000019_leftImg8bit.png         PNG images
    OUT/gtFine/train/aachen/aachen_000000_000019_gtFine_labelTrainIds.png     train ids
    OUT/leftImg8bit/val/frankfurt/...  OUT/gtFine/val/frankfurt/...

with images twice as wide as high and Cityscapes' train ids: 'road' backgrounds, shapes
'vegetation', 'person' and 'car', and 255 (ignored) around each shape.

``python tools/misc/make_toy_dataset.py folder OUT`` writes the simple layout of a
user's own data, read by ``inline_mm``'s ``SegFolderDataset``::

    OUT/meta.json                      {"classes": [...], "palette": [[r, g, b], ...]}
    OUT/images/{train,val}/0000.jpg    images (a few are PNG: real folders mix formats)
    OUT/masks/{train,val}/0000.png     one class index per pixel (palette PNG)

where 0 is a real class ('background').  With ``--broken-dir DIR`` it also writes
small copies of that dataset, each with one typical mistake, for
``tools/misc/check_dataset.py`` to find (see ``BROKEN_VARIANTS``).

Images vary in size and aspect ratio; the class is the shape, never the colour.
Everything is drawn from one seed: the same arguments give the same files.
"""
import argparse
import json
import math
import os
import os.path as osp
import shutil
from typing import Dict, List, Optional, Sequence, Tuple

import cv2
import numpy as np
from PIL import Image

__all__ = ['KIND_HELP', 'FOLDER_CLASSES', 'FOLDER_PALETTE', 'ADE_VALUES', 'BROKEN_VARIANTS',
           'CITYSCAPES_TRAIN_IDS', 'add_arguments', 'run', 'make_ade_toy',
           'make_cityscapes_toy', 'make_folder_toy', 'make_broken_variants', 'save_index_png']

KIND_HELP = {
    'ade': 'ADE20K layout (images/, annotations/ with values 0..150) for the '
           '*_ade20k configs',
    'cityscapes': 'Cityscapes layout (leftImg8bit/, gtFine/ *_labelTrainIds.png, 2:1 '
                  'images) for the *_cityscapes configs',
    'folder': 'your-own-data layout: images/{train,val}, masks/{train,val}, meta.json '
              '(--broken-dir also writes broken variants)',
}

SHAPES = ('circle', 'triangle', 'rectangle')

#: classes and palette of the ``folder`` kind (class index = position)
FOLDER_CLASSES = ('background', 'circle', 'triangle', 'rectangle')
FOLDER_PALETTE = ((0, 0, 0), (220, 20, 60), (0, 128, 255), (255, 200, 0))

#: mask value of each region in the ``ade`` kind (ADE20K numbering: value = class + 1)
ADE_VALUES = {'unlabelled': 0, 'background': 1, 'circle': 5, 'triangle': 13,
              'rectangle': 21}    # wall, tree, person, car

#: train id of each region in the ``cityscapes`` kind (255: ignored, as Cityscapes' void)
CITYSCAPES_TRAIN_IDS = {'unlabelled': 255, 'background': 0, 'circle': 8, 'triangle': 11,
                        'rectangle': 13}    # road, vegetation, person, car
CITYSCAPES_CITIES = {'train': ('aachen', 'bremen'), 'val': ('frankfurt', 'lindau')}

#: broken variant -> the problem code tools/misc/check_dataset.py must report for it
BROKEN_VARIANTS = {
    'unpaired': 'unpaired-image',          # a mask deleted, and an orphan mask added
    'size_mismatch': 'size-mismatch',      # one mask at another size than its image
    'rgb_masks': 'rgb-mask',               # masks saved as colour pictures
    'out_of_range': 'label-out-of-range',  # a label value >= num_classes (not 255)
    'binary_255': 'binary-0-255',          # a 2-class set stored as 0/255
    'empty_split': 'empty-split',          # no validation images
    'exif_rotation': 'exif-rotation',      # a JPEG whose EXIF tag rotates it
}


# --------------------------------------------------------------------- drawing
def _texture(rng: np.random.Generator, h: int, w: int) -> Tuple[np.ndarray, np.ndarray]:
    """A random ``(h, w, 3)`` uint8 background (smooth noise or stripes, plus noise) and
    its mean colour.

    Backgrounds are greyish (a small tint) and their pattern varies the grey by at most
    ~60 levels: visible texture that a model must learn to ignore, not camouflage. Shapes
    are saturated colours (:func:`_object_colour`), so telling them from the background
    is learnable in a short run; telling them apart still needs their shape. (With two
    unrelated random colours per background a 600-iteration run from random weights
    learned nothing but the class frequencies.)"""
    c0 = rng.uniform(40, 215) + rng.uniform(-12, 12, 3)
    c1 = np.clip(c0 + rng.uniform(-60, 60), 0, 255)
    if rng.random() < 0.5:
        grid = rng.uniform(0, 1, (int(rng.integers(2, 6)), int(rng.integers(2, 6))))
        t = cv2.resize(grid.astype(np.float32), (w, h), interpolation=cv2.INTER_CUBIC)
    else:
        yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
        angle, period = rng.uniform(0, math.pi), rng.uniform(5, 20)
        t = 0.5 + 0.5 * np.sin(2 * math.pi * (xx * math.cos(angle) + yy * math.sin(angle))
                               / period)
    t = np.clip(t, 0, 1)[..., None]
    img = c0 * (1 - t) + c1 * t + rng.normal(0, 6, (h, w, 3))
    return np.clip(img, 0, 255).astype(np.uint8), (c0 + c1) / 2


def _object_colour(rng: np.random.Generator, background: np.ndarray) -> np.ndarray:
    """A random saturated colour (one channel >= 150 above another) clearly apart from
    the background's (RGB distance >= 100)."""
    for _ in range(100):
        c = rng.uniform(0, 255, 3)
        if c.max() - c.min() >= 150 and np.linalg.norm(c - background) >= 100:
            return c
    return np.array([255.0, 0.0, 0.0])


def _draw_shape(rng: np.random.Generator, shape: str, h: int, w: int) -> np.ndarray:
    """Binary ``(h, w)`` mask of one randomly placed, sized and rotated shape."""
    r = rng.uniform(0.12, 0.28) * min(h, w)
    cx, cy = rng.uniform(r, w - r), rng.uniform(r, h - r)
    mask = np.zeros((h, w), np.uint8)
    if shape == 'circle':
        cv2.circle(mask, (round(cx), round(cy)), round(r), 1, -1)
        return mask
    if shape == 'triangle':
        angles = rng.uniform(0, 2 * math.pi) + np.array([0, 2, 4]) * math.pi / 3
    else:
        a0 = rng.uniform(0, math.pi / 2)
        angles = a0 + np.array([0, 0.5, 1, 1.5]) * math.pi + rng.uniform(-0.3, 0.3) * (
            np.array([1, -1, 1, -1]))
    pts = np.stack([cx + r * np.cos(angles), cy + r * np.sin(angles)], 1)
    cv2.fillPoly(mask, [np.round(pts).astype(np.int32)], 1)
    return mask


def _draw_sample(rng: np.random.Generator, size: int, band: int = 0, aspect: float = 1.
                 ) -> Tuple[np.ndarray, Dict[str, np.ndarray]]:
    """One RGB image and a boolean region per label name.

    ``band`` > 0 carves an unlabelled ring of that width around each shape (the
    ADE20K look); regions are then 'background', shapes and 'unlabelled'. The image is
    about ``size`` high and ``aspect`` times as wide.
    """
    h = int(size * rng.uniform(0.75, 1.25))
    w = int(size * aspect * rng.uniform(0.75, 1.25))
    img, background = _texture(rng, h, w)
    label = np.zeros((h, w), np.int64)                      # index into names
    names = ('background',) + SHAPES + ('unlabelled',)
    for _ in range(int(rng.integers(1, 4))):
        k = int(rng.integers(len(SHAPES)))
        m = _draw_shape(rng, SHAPES[k], h, w).astype(bool)
        if band:
            ring = cv2.dilate(m.astype(np.uint8), np.ones((2 * band + 1,) * 2, np.uint8))
            label[ring.astype(bool) & ~m] = len(names) - 1
        colour = _object_colour(rng, background)
        img[m] = np.clip(colour + rng.normal(0, 6, (int(m.sum()), 3)), 0, 255)
        label[m] = 1 + k
    return img, {n: label == i for i, n in enumerate(names)}


def save_index_png(path: str, index: np.ndarray, palette: Optional[Sequence] = None):
    """Save a label-index mask as PNG: palette mode ('P') when a palette is given
    (viewers show colours, readers get the indices), else 8-bit grey ('L')."""
    if index.max(initial=0) > 255 or index.min(initial=0) < 0:
        raise ValueError(f'{path}: label values must be in 0..255 for an 8-bit PNG')
    im = Image.fromarray(index.astype(np.uint8))
    if palette is not None:
        im = im.convert('P')
        flat = [c for rgb in palette for c in rgb]
        im.putpalette(flat + [0] * (768 - len(flat)))
    im.save(path)


def _save_image(path: str, img: np.ndarray, exif_orientation: Optional[int] = None):
    im = Image.fromarray(img)
    if exif_orientation is not None:
        exif = Image.Exif()
        exif[0x0112] = exif_orientation
        im.save(path, quality=92, exif=exif)
    else:
        im.save(path, quality=92)


# ----------------------------------------------------------------------- kinds
def make_ade_toy(out: str, num_train: int = 40, num_val: int = 10, size: int = 128,
                 seed: int = 0) -> Dict[str, int]:
    """Write an ADE20K-layout toy set under ``out``; returns images per split."""
    rng = np.random.default_rng(seed)
    counts = {}
    for split, tag, n in (('training', 'train', num_train), ('validation', 'val', num_val)):
        os.makedirs(osp.join(out, 'images', split), exist_ok=True)
        os.makedirs(osp.join(out, 'annotations', split), exist_ok=True)
        for i in range(n):
            img, regions = _draw_sample(rng, size, band=max(1, size // 64))
            ann = np.zeros(img.shape[:2], np.int64)
            for name, region in regions.items():
                ann[region] = ADE_VALUES[name]
            stem = f'ADE_{tag}_{i + 1:08d}'
            _save_image(osp.join(out, 'images', split, stem + '.jpg'), img)
            save_index_png(osp.join(out, 'annotations', split, stem + '.png'), ann)
        counts[split] = n
    return counts


def make_cityscapes_toy(out: str, num_train: int = 12, num_val: int = 4, size: int = 64,
                        seed: int = 0) -> Dict[str, int]:
    """Write a Cityscapes-layout toy set under ``out`` (images twice as wide as high, as
    Cityscapes' 1024x2048, in two cities per split); returns images per split."""
    rng = np.random.default_rng(seed)
    counts = {}
    for split, n in (('train', num_train), ('val', num_val)):
        for i in range(n):
            city = CITYSCAPES_CITIES[split][i % 2]
            img, regions = _draw_sample(rng, size, band=max(1, size // 64), aspect=2.)
            ann = np.zeros(img.shape[:2], np.int64)
            for name, region in regions.items():
                ann[region] = CITYSCAPES_TRAIN_IDS[name]
            stem = f'{city}_{i // 2:06d}_{19:06d}'
            for folder in ('leftImg8bit', 'gtFine'):
                os.makedirs(osp.join(out, folder, split, city), exist_ok=True)
            Image.fromarray(img).save(osp.join(out, 'leftImg8bit', split, city,
                                               f'{stem}_leftImg8bit.png'))
            save_index_png(osp.join(out, 'gtFine', split, city,
                                    f'{stem}_gtFine_labelTrainIds.png'), ann)
        counts[split] = n
    return counts


def _write_meta(out: str, classes: Sequence[str], palette: Sequence[Sequence[int]]):
    os.makedirs(out, exist_ok=True)
    with open(osp.join(out, 'meta.json'), 'w') as f:
        json.dump({'classes': list(classes), 'palette': [list(p) for p in palette]}, f,
                  indent=1)


def make_folder_toy(out: str, num_train: int = 24, num_val: int = 8, size: int = 96,
                    seed: int = 0, png_every: int = 5) -> Dict[str, List[str]]:
    """Write the images/ + masks/ + meta.json layout under ``out``.

    Every ``png_every``-th image is a PNG instead of a JPEG (0: all JPEG).
    Returns the file stems per split.
    """
    rng = np.random.default_rng(seed)
    _write_meta(out, FOLDER_CLASSES, FOLDER_PALETTE)
    stems: Dict[str, List[str]] = {}
    for split, n in (('train', num_train), ('val', num_val)):
        os.makedirs(osp.join(out, 'images', split), exist_ok=True)
        os.makedirs(osp.join(out, 'masks', split), exist_ok=True)
        stems[split] = []
        for i in range(n):
            img, regions = _draw_sample(rng, size)
            index = np.zeros(img.shape[:2], np.int64)
            for c, name in enumerate(FOLDER_CLASSES):
                index[regions[name]] = c
            stem = f'{split}_{i:04d}'
            ext = '.png' if png_every and i % png_every == png_every - 1 else '.jpg'
            _save_image(osp.join(out, 'images', split, stem + ext), img)
            save_index_png(osp.join(out, 'masks', split, stem + '.png'), index,
                           FOLDER_PALETTE)
            stems[split].append(stem)
    return stems


def _mask_path(root: str, split: str, stem: str) -> str:
    return osp.join(root, 'masks', split, stem + '.png')


def _read_index(path: str) -> np.ndarray:
    return np.array(Image.open(path))


def make_broken_variants(out: str, size: int = 64, seed: int = 1) -> Dict[str, str]:
    """Write one small folder dataset per entry of ``BROKEN_VARIANTS`` under ``out``.

    Returns ``{variant: file the mistake was put in}`` (relative to its dataset).
    """
    touched = {}
    for name in BROKEN_VARIANTS:
        root = osp.join(out, name)
        if osp.isdir(root):
            shutil.rmtree(root)
        stems = make_folder_toy(root, num_train=4, num_val=2, size=size, seed=seed,
                                png_every=0)
        first = stems['train'][0]
        if name == 'unpaired':
            os.remove(_mask_path(root, 'train', first))
            orphan = _mask_path(root, 'val', 'val_orphan')
            shutil.copy(_mask_path(root, 'val', stems['val'][0]), orphan)
            touched[name] = f'masks/train/{first}.png'
        elif name == 'size_mismatch':
            path = _mask_path(root, 'train', first)
            m = _read_index(path)
            save_index_png(path, cv2.resize(m, (m.shape[1] + 7, m.shape[0]),
                                            interpolation=cv2.INTER_NEAREST), FOLDER_PALETTE)
            touched[name] = f'masks/train/{first}.png'
        elif name == 'rgb_masks':
            lut = np.array(FOLDER_PALETTE, np.uint8)
            for split in stems:
                for stem in stems[split]:
                    path = _mask_path(root, split, stem)
                    Image.fromarray(lut[_read_index(path)]).save(path)
            touched[name] = f'masks/train/{first}.png'
        elif name == 'out_of_range':
            path = _mask_path(root, 'train', first)
            m = _read_index(path)
            m[:4, :4] = len(FOLDER_CLASSES) + 2
            save_index_png(path, m, FOLDER_PALETTE)
            touched[name] = f'masks/train/{first}.png'
        elif name == 'binary_255':
            # "object vs background" exported by a paint tool: white on black.
            _write_meta(root, ('background', 'object'), ((0, 0, 0), (255, 255, 255)))
            for split in stems:
                for stem in stems[split]:
                    path = _mask_path(root, split, stem)
                    save_index_png(path, np.where(_read_index(path) > 0, 255, 0))
            touched[name] = f'masks/train/{first}.png'
        elif name == 'empty_split':
            for sub in ('images', 'masks'):
                for f in os.listdir(osp.join(root, sub, 'val')):
                    os.remove(osp.join(root, sub, 'val', f))
            touched[name] = 'images/val'
        elif name == 'exif_rotation':
            path = osp.join(root, 'images', 'train', first + '.jpg')
            _save_image(path, np.array(Image.open(path)), exif_orientation=6)
            touched[name] = f'images/train/{first}.jpg'
    return touched


# ------------------------------------------------------------------------- CLI
def add_arguments(parser: argparse.ArgumentParser, kind: str):
    defaults = {'ade': (40, 10, 128), 'cityscapes': (12, 4, 64), 'folder': (24, 8, 96)}[kind]
    parser.add_argument('--num-train', type=int, default=defaults[0],
                        help=f'training images ({defaults[0]})')
    parser.add_argument('--num-val', type=int, default=defaults[1],
                        help=f'validation images ({defaults[1]})')
    parser.add_argument('--size', type=int, default=defaults[2],
                        help=f'typical image side in pixels, varied by +-25%% ({defaults[2]})')
    parser.add_argument('--seed', type=int, default=0, help='random seed (0)')
    if kind == 'folder':
        parser.add_argument('--broken-dir', default=None,
                            help='also write one broken copy per typical mistake here '
                                 f'({", ".join(BROKEN_VARIANTS)})')


def run(args: argparse.Namespace):
    for name in ('num_train', 'num_val'):
        if getattr(args, name) < 1:
            raise SystemExit(f'error: --{name.replace("_", "-")} must be >= 1')
    if args.size < 32:
        raise SystemExit('error: --size must be >= 32 (the backbones need 32x32 inputs)')
    if args.kind == 'ade':
        counts = make_ade_toy(args.out, args.num_train, args.num_val, args.size, args.seed)
        print(f'wrote ADE20K-layout toy set to {args.out}: '
              f'{counts["training"]} training, {counts["validation"]} validation images')
        return
    if args.kind == 'cityscapes':
        counts = make_cityscapes_toy(args.out, args.num_train, args.num_val, args.size,
                                     args.seed)
        print(f'wrote Cityscapes-layout toy set to {args.out}: {counts["train"]} training, '
              f'{counts["val"]} validation images')
        return
    stems = make_folder_toy(args.out, args.num_train, args.num_val, args.size, args.seed)
    print(f'wrote folder dataset to {args.out}: {len(stems["train"])} train, '
          f'{len(stems["val"])} val images, classes {list(FOLDER_CLASSES)}')
    if args.broken_dir:
        touched = make_broken_variants(args.broken_dir)
        for name, where in touched.items():
            print(f'  broken variant {osp.join(args.broken_dir, name)}: '
                  f'{BROKEN_VARIANTS[name]} ({where})')
