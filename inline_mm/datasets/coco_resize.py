"""A copy of a COCO split with some images resized, their boxes, polygons and RLE masks
(compressed or not) scaled with them: test data whose images differ in size, for checking that
batching padded images changes nothing (``tools/analysis_tools/padding_consistency.py``).
Needs OpenCV and pycocotools (mmdet's requirements).
"""
import json
import os
import os.path as osp
import shutil

import numpy as np


def uncompressed_rle(mask):
    flat = mask.flatten(order='F').astype(np.int8)
    bounds = np.concatenate([[0], np.flatnonzero(np.diff(flat)) + 1, [flat.size]])
    counts = ([0] if flat[0] else []) + np.diff(bounds).tolist()
    return {'size': list(mask.shape), 'counts': counts}


def resize_annotation(ann, old_hw, new_hw):
    import cv2
    from pycocotools import mask as mask_utils
    (h0, w0), (h1, w1) = old_hw, new_hw
    sx, sy = w1 / w0, h1 / h0
    x, y, w, h = ann['bbox']
    ann['bbox'] = [x * sx, y * sy, w * sx, h * sy]
    seg = ann['segmentation']
    if isinstance(seg, list):
        ann['segmentation'] = [[v * (sx if k % 2 == 0 else sy) for k, v in enumerate(poly)]
                               for poly in seg]
        rle = mask_utils.merge(mask_utils.frPyObjects(ann['segmentation'], h1, w1))
    else:
        rle = mask_utils.frPyObjects(seg, h0, w0) if isinstance(seg['counts'], list) else \
            dict(seg, counts=seg['counts'].encode('ascii'))
        mask = cv2.resize(mask_utils.decode(rle), (w1, h1), interpolation=cv2.INTER_NEAREST)
        rle = mask_utils.encode(np.asfortranarray(mask))
        ann['segmentation'] = uncompressed_rle(mask) if isinstance(seg['counts'], list) else \
            dict(size=rle['size'], counts=rle['counts'].decode('ascii'))
    ann['area'] = float(mask_utils.area(rle))


def pick_images(n, k, seed):
    """``k`` of ``n`` image indices such that as many test batches of two as possible
    (images 0-1, 2-3, ...) mix a resized and a full-size image: one image of each of
    ``min(k, n // 2)`` batches, then others, all picked with ``seed``."""
    rng = np.random.RandomState(seed)
    pairs = n // 2
    first = [2 * int(p) + int(rng.randint(2))
             for p in sorted(rng.permutation(pairs)[:min(k, pairs)])]
    rest = [int(i) for i in rng.permutation([i for i in range(n) if i not in first])]
    if n % 2:           # the last image of an odd set is batched alone: resize it first
        rest = [n - 1] + [i for i in rest if i != n - 1]
    return sorted(first + rest[:k - len(first)])


def write_resized_set(src_root, ann_rel, img_rel, dst_root, fraction, size_wh, seed):
    """A copy of the split with a seeded choice of its images resized; returns the
    resized image indices (in file order, which is the test loader's)."""
    import cv2
    with open(osp.join(src_root, ann_rel)) as f:
        coco = json.load(f)
    n = len(coco['images'])
    chosen = pick_images(n, round(fraction * n), seed)
    by_image = {}
    for ann in coco['annotations']:
        by_image.setdefault(ann['image_id'], []).append(ann)
    os.makedirs(osp.join(dst_root, img_rel), exist_ok=True)
    os.makedirs(osp.dirname(osp.join(dst_root, ann_rel)), exist_ok=True)
    for idx, im in enumerate(coco['images']):
        src, dst = (osp.join(r, img_rel, im['file_name']) for r in (src_root, dst_root))
        if idx not in chosen:
            shutil.copyfile(src, dst)
            continue
        img = cv2.imread(src, cv2.IMREAD_COLOR)
        cv2.imwrite(dst, cv2.resize(img, tuple(size_wh), interpolation=cv2.INTER_LINEAR),
                    [cv2.IMWRITE_JPEG_QUALITY, 95])
        for ann in by_image.get(im['id'], []):
            resize_annotation(ann, (im['height'], im['width']), (size_wh[1], size_wh[0]))
        im['width'], im['height'] = size_wh
    with open(osp.join(dst_root, ann_rel), 'w') as f:
        json.dump(coco, f)
    return chosen
