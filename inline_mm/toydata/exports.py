"""Annotation-tool exports of the toy shapes, as a newcomer brings them (docs/own_instances.md).

``python tools/misc/make_toy_dataset.py coco-export OUT`` writes a COCO export the way
annotation tools write one, with the defects real exports have::

    OUT/annotations/train.json, val.json   category ids 3, 7, 12 (not 1..K); one crowd
                                           region (iscrowd=1, RLE) per few images
    OUT/images/train/0001.jpg ...          file_name "train/0001.jpg"
      train/0003.jpg   a phone photo: pixels stored unturned with EXIF orientation 6, the
                       json's width/height those of the unturned pixels
      train/0007.jpg   truncated (an interrupted copy)
      train/0005.jpg, train/0009.jpg, val/0002.jpg   no annotations (empty scenes)

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
    'coco-export': 'a COCO export with the defects of real ones (ids 3/7/12, crowd regions, '
                   'empty images, a rotated photo, a truncated file)',
    'labelme': 'a labelme folder (one json per image; polygons, circles, rectangles)',
}
CLASSES = ('circle', 'triangle', 'rectangle')
EXPORT_IDS = (3, 7, 12)
ROTATED, TRUNCATED, EMPTY = 'train/0003.jpg', 'train/0007.jpg', ('train/0005.jpg', 'train/0009.jpg',
                                                                 'val/0002.jpg')


def _jpeg(img: np.ndarray, exif_orientation: int = 0) -> bytes:
    im = Image.fromarray(img[..., ::-1].copy())
    buf = io.BytesIO()
    if exif_orientation:
        exif = Image.Exif()
        exif[0x0112] = exif_orientation
        im.save(buf, 'JPEG', quality=90, exif=exif.tobytes())
    else:
        im.save(buf, 'JPEG', quality=90)
    return buf.getvalue()


def make_coco_export(out: str, num_train: int = 40, num_val: int = 12, size: int = 96,
                     seed: int = 0) -> dict:
    """Write the COCO export described in the module docstring; returns counts."""
    if num_train < 10 or num_val < 2:
        raise ValueError('need at least 10 train and 2 val images (the planted defects are '
                         f'train/0003, 0005, 0007, 0009 and val/0002); got {num_train}, {num_val}')
    rng = np.random.default_rng(seed)
    cats = [dict(id=i, name=n, supercategory='shape') for i, n in zip(EXPORT_IDS, CLASSES)]
    counts = {}
    for split, n in (('train', num_train), ('val', num_val)):
        os.makedirs(osp.join(out, 'images', split), exist_ok=True)
        images, anns = [], []
        for i in range(n):
            name = f'{split}/{i + 1:04d}.jpg'
            if name in EMPTY:
                img, drawn = np.clip(_texture(rng, size, size)[0], 0, 255).astype(np.uint8), []
            else:
                img, drawn = _draw_image(rng, size, CLASSES, 3)
            h, w = img.shape[:2]
            orientation = 0
            if name == ROTATED:     # a wider photo, stored unturned, tagged "turn 90 degrees"
                pad = np.clip(_texture(rng, h, w // 3)[0], 0, 255).astype(np.uint8)
                img, orientation = np.concatenate([img, pad], 1), 6
                for a in drawn:     # RLE masks cover the whole (now wider) image
                    if isinstance(a['segmentation'], dict):
                        m = mask_utils.decode(mask_utils.frPyObjects(a['segmentation'], h, w)
                                              if isinstance(a['segmentation']['counts'], list)
                                              else dict(a['segmentation'], counts=a[
                                                  'segmentation']['counts'].encode()))
                        m = np.pad(m, ((0, 0), (0, w // 3)))
                        rle = mask_utils.encode(np.asfortranarray(m))
                        a['segmentation'] = dict(size=rle['size'],
                                                 counts=rle['counts'].decode('ascii'))
                w += w // 3
            data = _jpeg(img, orientation)
            if name == TRUNCATED:
                data = data[:len(data) * 3 // 5]
            with open(osp.join(out, 'images', name), 'wb') as f:
                f.write(data)
            images.append(dict(id=i + 1, file_name=name, width=w, height=h))
            for k, a in enumerate(drawn):
                a['category_id'] = EXPORT_IDS[a['category_id'] - 1]
                if k == 0 and i % 4 == 1 and not isinstance(a['segmentation'], list):
                    # a crowd region, stored as tools store them: compressed RLE
                    a['iscrowd'] = 1
                elif isinstance(a['segmentation'], dict) and \
                        not isinstance(a['segmentation']['counts'], str):
                    rle = mask_utils.frPyObjects(a['segmentation'], h, w)
                    a['segmentation'] = dict(size=rle['size'],
                                             counts=rle['counts'].decode('ascii'))
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
            f.write(_jpeg(img))
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
              + f'; planted: rotated {ROTATED}, truncated {TRUNCATED}, empty {", ".join(EMPTY)}')
    else:
        n = make_labelme(args.out, args.num, args.size, args.seed)
        print(f'wrote {args.out}: {args.num} images with {n} labelme shapes')
