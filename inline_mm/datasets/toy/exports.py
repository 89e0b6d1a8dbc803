"""Annotation-tool exports of the toy shapes, as a newcomer brings them (docs/own_instances.md).

``python tools/misc/make_toy_dataset.py coco-export OUT`` writes a COCO export the way
annotation tools write one, with the defects real exports have::

    OUT/annotations/train.json, val.json   category ids 3, 7, 12 (not 1..K) and 15, which no
                                           annotation uses; one crowd region (iscrowd=1,
                                           compressed RLE) per few images
    OUT/images/train/0001.jpg ...          file_name "train/0001.jpg"
      train/0001.jpg   greyscale
      train/0002.jpg   one more annotation, of an undeclared category id (5)
      train/0003.jpg   a phone photo annotated on its stored pixels: they are stored unturned
                       with EXIF orientation 6, and the json's width/height and annotations
                       are those of the unturned pixels (the tool ignored the tag)
      train/0004.jpg   one more annotation, a polygon of 2 points
      train/0006.jpg   a phone photo annotated as it is shown (turned by its EXIF tag 6), but
                       the json's width/height are those of the stored pixels
      train/0007.jpg   truncated (an interrupted copy)
      train/0008.jpg   one more object at the right edge, annotated beyond it: its box is
                       mostly outside the image
      train/0010.png   a PNG
      train/0005.jpg, train/0009.jpg, val/0002.jpg   no annotations (empty scenes)

The two photos are twice as long as wide, their shapes in the half away from the stored
pixels' origin, so that every annotation tells which frame it was drawn on.

``python tools/misc/make_toy_dataset.py labelme OUT`` writes a labelme folder: ``NNNN.jpg``
with ``NNNN.json`` (polygons; discs as labelme circles; one rectangle shape per few images).
"""
import argparse
import io
import json
import os
import os.path as osp

import numpy as np
from PIL import Image
from pycocotools import mask as mask_utils

from .coco import _draw_image, _texture

__all__ = ['KIND_HELP', 'add_arguments', 'run', 'make_coco_export', 'make_labelme']

KIND_HELP = {
    'coco-export': 'a COCO export with the defects of real ones (ids 3/7/12, an unused '
                   'category, crowd regions, empty images, rotated photos, a truncated file, '
                   'bad annotations)',
    'labelme': 'a labelme folder (one json per image; polygons, circles, rectangles)',
}
CLASSES = ('circle', 'triangle', 'rectangle')
EXPORT_IDS = (3, 7, 12)
UNUSED = dict(id=15, name='star')           # declared, never used
UNDECLARED_ID = 5
#: the planted images (file_name in the json)
GREY, UNDECLARED, STORED_FRAME, DEGENERATE = ('train/0001.jpg', 'train/0002.jpg',
                                              'train/0003.jpg', 'train/0004.jpg')
TURNED_FRAME, TRUNCATED, OUTSIDE, PNG = ('train/0006.jpg', 'train/0007.jpg',
                                         'train/0008.jpg', 'train/0010.png')
EMPTY = ('train/0005.jpg', 'train/0009.jpg', 'val/0002.jpg')
ROTATED = (STORED_FRAME, TURNED_FRAME)


def _encode(img: np.ndarray, fmt: str = 'JPEG', exif_orientation: int = 0) -> bytes:
    """A BGR (or greyscale 2-D) image as file bytes, with an EXIF orientation tag."""
    im = Image.fromarray(img[..., ::-1].copy() if img.ndim == 3 else img)
    buf = io.BytesIO()
    kwargs = dict(quality=90) if fmt == 'JPEG' else {}
    if exif_orientation:
        exif = Image.Exif()
        exif[0x0112] = exif_orientation
        kwargs['exif'] = exif.tobytes()
    im.save(buf, fmt, **kwargs)
    return buf.getvalue()


def _rle_of(segm: dict, h: int, w: int) -> np.ndarray:
    rle = mask_utils.frPyObjects(segm, h, w) if isinstance(segm['counts'], list) else \
        dict(segm, counts=segm['counts'].encode('ascii'))
    return mask_utils.decode(rle)


def _compressed(mask: np.ndarray) -> dict:
    rle = mask_utils.encode(np.asfortranarray(mask))
    return dict(size=rle['size'], counts=rle['counts'].decode('ascii'))


def _embed(rng: np.random.Generator, img: np.ndarray, anns: list, height: int, width: int,
           dx: int, dy: int):
    """The scene ``img`` at (dx, dy) on a textured ``height`` x ``width`` canvas, its
    annotations moved with it (RLE masks re-encoded at the canvas size)."""
    h, w = img.shape[:2]
    canvas = np.clip(_texture(rng, height, width)[0], 0, 255).astype(np.uint8)
    canvas[dy:dy + h, dx:dx + w] = img
    for a in anns:
        x, y, bw, bh = a['bbox']
        a['bbox'] = [x + dx, y + dy, bw, bh]
        segm = a['segmentation']
        if isinstance(segm, dict):
            m = np.zeros((height, width), np.uint8)
            m[dy:dy + h, dx:dx + w] = _rle_of(segm, h, w)
            a['segmentation'] = _compressed(m)
        else:
            a['segmentation'] = [[v + (dx if k % 2 == 0 else dy) for k, v in enumerate(part)]
                                 for part in segm]
    return canvas, anns


def _cut_object(img: np.ndarray, rng: np.random.Generator) -> dict:
    """Paint a rectangle that the right edge cuts (three quarters of it beyond), and return
    its annotation as a tool that lets one draw past the edge stores it."""
    h, w = img.shape[:2]
    bw, bh = max(8, w // 3), max(6, h // 5)
    x0, y0 = w - bw // 4, h // 2 - bh // 2
    img[y0:y0 + bh, x0:] = rng.uniform(0, 255, 3).astype(np.uint8)
    poly = [x0, y0, x0 + bw, y0, x0 + bw, y0 + bh, x0, y0 + bh]
    return dict(category_id=3, segmentation=[[float(v) for v in poly]], iscrowd=0,
                area=float(bw * bh), bbox=[float(x0), float(y0), float(bw), float(bh)])


def make_coco_export(out: str, num_train: int = 40, num_val: int = 12, size: int = 96,
                     seed: int = 0) -> dict:
    """Write the COCO export described in the module docstring; returns counts."""
    if num_train < 10 or num_val < 2:
        raise ValueError('need at least 10 train and 2 val images (the planted defects are '
                         f'train/0001 to train/0010 and val/0002); got {num_train}, {num_val}')
    rng = np.random.default_rng(seed)
    cats = [dict(id=i, name=n, supercategory='shape') for i, n in zip(EXPORT_IDS, CLASSES)]
    cats.append(dict(UNUSED, supercategory='shape'))
    counts = {}
    for split, n in (('train', num_train), ('val', num_val)):
        os.makedirs(osp.join(out, 'images', split), exist_ok=True)
        images, anns = [], []
        for i in range(n):
            name = f'{split}/{i + 1:04d}.jpg'
            name = PNG if name[:-4] == PNG[:-4] else name
            if name in EMPTY:
                img, drawn = np.clip(_texture(rng, size, size)[0], 0, 255).astype(np.uint8), []
            else:
                img, drawn = _draw_image(rng, size, CLASSES, 3)
            orientation, extra = 0, []
            if name == STORED_FRAME:    # stored wide, shapes on the right: x beyond `size`
                img, drawn = _embed(rng, img, drawn, size, 2 * size, size, 0)
                orientation = 6
            elif name == TURNED_FRAME:  # shown tall, shapes below: y beyond `size`
                img, drawn = _embed(rng, img, drawn, 2 * size, size, 0, size)
                img, orientation = np.ascontiguousarray(np.rot90(img, 1)), 6   # stored pixels
            elif name == GREY:
                img = img.mean(2).astype(np.uint8)
            elif name == OUTSIDE:
                extra.append(_cut_object(img, rng))
            elif name == UNDECLARED and drawn:
                extra.append(dict(drawn[0], category_id=UNDECLARED_ID))
            elif name == DEGENERATE and drawn:
                x, y, bw, bh = drawn[0]['bbox']
                extra.append(dict(category_id=1, segmentation=[[x, y, x + bw, y + bh]],
                                  iscrowd=0, area=float(bw * bh), bbox=[x, y, bw, bh]))
            h, w = img.shape[:2]        # the stored pixels' size, as the export lists it
            data = _encode(img, 'PNG' if name == PNG else 'JPEG', orientation)
            if name == TRUNCATED:
                data = data[:len(data) * 3 // 5]
            with open(osp.join(out, 'images', name), 'wb') as f:
                f.write(data)
            images.append(dict(id=i + 1, file_name=name, width=w, height=h))
            for k, a in enumerate(drawn + extra):
                if a['category_id'] in (1, 2, 3):
                    a['category_id'] = EXPORT_IDS[a['category_id'] - 1]
                if k == 0 and i % 4 == 1 and isinstance(a['segmentation'], dict):
                    a['iscrowd'] = 1    # a crowd region, stored as tools store them
                if isinstance(a['segmentation'], dict) and \
                        not isinstance(a['segmentation']['counts'], str):
                    a['segmentation'] = _compressed(_rle_of(a['segmentation'], *a[
                        'segmentation']['size']))
                a.update(id=len(anns) + 1, image_id=i + 1)
                anns.append(a)
        os.makedirs(osp.join(out, 'annotations'), exist_ok=True)
        with open(osp.join(out, 'annotations', f'{split}.json'), 'w') as f:
            json.dump(dict(images=images, annotations=anns, categories=cats), f)
        counts[split] = (len(images), len(anns))
    return counts


def make_labelme(out: str, num: int = 24, size: int = 96, seed: int = 0) -> int:
    """Write ``num`` labelme pairs under ``out``; returns the number of shapes."""
    rng = np.random.default_rng(seed)
    os.makedirs(out, exist_ok=True)
    shapes_written = 0
    for i in range(num):
        img, drawn = _draw_image(rng, size, CLASSES, 3)
        name = f'{i + 1:04d}'
        with open(osp.join(out, name + '.jpg'), 'wb') as f:
            f.write(_encode(img))
        shapes = []
        for a in drawn:
            label = CLASSES[a['category_id'] - 1]
            x, y, bw, bh = a['bbox']
            if label == 'circle':
                cx, cy, r = x + bw / 2, y + bh / 2, bw / 2
                shape = dict(shape_type='circle', points=[[cx, cy], [cx + r, cy]])
            elif label == 'rectangle' and i % 3 == 0:
                shape = dict(shape_type='rectangle', points=[[x, y], [x + bw, y + bh]])
            else:
                poly = a['segmentation'][0]
                shape = dict(shape_type='polygon',
                             points=[[poly[k], poly[k + 1]] for k in range(0, len(poly), 2)])
            shapes.append(dict(label=label, group_id=None, flags={}, **shape))
        with open(osp.join(out, name + '.json'), 'w') as f:
            json.dump(dict(version='5.4.1', flags={}, shapes=shapes, imagePath=name + '.jpg',
                           imageData=None, imageHeight=size, imageWidth=size), f, indent=1)
        shapes_written += len(shapes)
    return shapes_written


def add_arguments(parser: argparse.ArgumentParser, kind: str = 'coco-export'):
    if kind == 'coco-export':
        parser.add_argument('--num-train', type=int, default=40, help='training images (40)')
        parser.add_argument('--num-val', type=int, default=12, help='validation images (12)')
    else:
        parser.add_argument('--num', type=int, default=24, help='images (24)')
    parser.add_argument('--size', type=int, default=96, help='image side in pixels (96)')
    parser.add_argument('--seed', type=int, default=0, help='random seed (0)')


def run(args: argparse.Namespace):
    if args.kind == 'coco-export':
        try:
            counts = make_coco_export(args.out, args.num_train, args.num_val, args.size,
                                      args.seed)
        except ValueError as e:
            raise SystemExit(f'error: {e}')
        print(f'wrote {args.out}: ' + ', '.join(f'{s} {n} images / {a} annotations'
                                                for s, (n, a) in counts.items())
              + f'; planted: photos with EXIF turns {", ".join(ROTATED)}, truncated '
                f'{TRUNCATED}, empty {", ".join(EMPTY)}, bad annotations on {UNDECLARED}, '
                f'{DEGENERATE}, {OUTSIDE}')
    else:
        n = make_labelme(args.out, args.num, args.size, args.seed)
        print(f'wrote {args.out}: {args.num} images with {n} labelme shapes')
