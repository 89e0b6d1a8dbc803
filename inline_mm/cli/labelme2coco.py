"""Convert a labelme folder (one json per image) into COCO instance files, split train/val.

    inline-mm-labelme2coco data/my_labelme data/my_coco --val-fraction 0.2

writes (the layout of the instance templates, configs/custom/*_custom-coco.py)::

    data/my_coco/annotations/train.json   COCO instances: polygon masks, boxes, areas
    data/my_coco/annotations/val.json
    data/my_coco/images/...               copies of the images (--symlink: links), at their
                                          path relative to the labelme folder

Shapes: ``polygon``, ``rectangle`` (a 4-point polygon) and ``circle`` (a 32-point polygon)
become masks; shapes with the same ``group_id`` in one file form one instance (an object in
parts); ``line``, ``linestrip``, ``point`` and ``mask`` shapes are skipped with a warning.
Categories get ids 1..K in the order of --classes, or of their sorted names; a json with no
shapes gives an image without annotations. The split is reproducible: each image's place
comes from a hash of its path and --seed, so the same folder and seed give the same split on
any machine. Nothing in the labelme folder is changed; an existing output is not overwritten.
"""
import base64
import hashlib
import json
import math
import os
import os.path as osp
import shutil
import sys
from collections import Counter, defaultdict
from typing import Dict, List, Optional, Sequence

from inline_mm.cli import doc_parser

SHAPES_AS_MASKS = ('polygon', 'rectangle', 'circle')


def _polygon(shape: dict) -> Optional[List[float]]:
    pts = shape.get('points') or []
    kind = shape.get('shape_type') or 'polygon'
    if kind == 'rectangle' and len(pts) == 2:
        (x0, y0), (x1, y1) = pts
        pts = [(x0, y0), (x1, y0), (x1, y1), (x0, y1)]
    elif kind == 'circle' and len(pts) == 2:
        (cx, cy), (ex, ey) = pts
        r = math.hypot(ex - cx, ey - cy)
        pts = [(cx + r * math.cos(2 * math.pi * k / 32), cy + r * math.sin(2 * math.pi * k / 32))
               for k in range(32)]
    elif kind != 'polygon':
        return None
    return [round(float(v), 2) for p in pts for v in p]


def _split(names: Sequence[str], val_fraction: float, seed: int) -> set:
    """The names that go to val: the round(n * fraction) with the smallest hashes."""
    key = {n: hashlib.sha256(f'{seed}:{n}'.encode()).hexdigest() for n in names}
    n_val = int(round(len(names) * val_fraction))
    if val_fraction > 0 and len(names) > 1:
        n_val = min(max(n_val, 1), len(names) - 1)
    return set(sorted(names, key=key.get)[:n_val])


def _instance(polys: List[List[float]], h: int, w: int) -> dict:
    from pycocotools import mask as mask_utils
    rle = mask_utils.merge(mask_utils.frPyObjects(polys, h, w))
    return dict(segmentation=polys, area=float(mask_utils.area(rle)),
                bbox=[float(v) for v in mask_utils.toBbox(rle)], iscrowd=0)


def convert(src: str, out: str, val_fraction: float = 0.2, seed: int = 0,
            classes: Optional[Sequence[str]] = None, symlink: bool = False) -> dict:
    """Convert ``src`` (labelme) into ``out`` (COCO); returns counts and warnings."""
    if not osp.isdir(src):
        raise SystemExit(f'error: {src} is not a folder')
    if not 0 <= val_fraction < 1:
        raise SystemExit(f'error: --val-fraction must be in [0, 1), got {val_fraction}')
    src_abs, out_abs = osp.abspath(src), osp.abspath(out)
    if out_abs == src_abs or out_abs.startswith(src_abs + os.sep):
        raise SystemExit(f'error: write the COCO files outside the labelme folder {src}, not '
                         f'into it ({out})')
    ann_dir = osp.join(out, 'annotations')
    existing = [f for f in ('train.json', 'val.json') if osp.exists(osp.join(ann_dir, f))]
    if existing:
        raise SystemExit(f'error: {ann_dir} already holds {", ".join(existing)}; choose another '
                         'output folder (nothing is overwritten)')
    files, warnings, problems = [], [], []
    for dirpath, dirnames, names in os.walk(src):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith('.'))
        files += [osp.join(dirpath, n) for n in sorted(names) if n.lower().endswith('.json')]
    records = []
    for path in files:
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, ValueError) as e:
            problems.append(f'{path}: not readable JSON ({e})')
            continue
        if not isinstance(data, dict) or 'shapes' not in data:
            warnings.append(f'{path}: not a labelme file (no "shapes"), skipped')
            continue
        img_rel = (data.get('imagePath') or '').replace('\\', '/')     # saved on Windows
        img_path = osp.normpath(osp.join(osp.dirname(path), img_rel))
        h, w = data.get('imageHeight'), data.get('imageWidth')
        if not isinstance(h, int) or not isinstance(w, int) or h <= 0 or w <= 0:
            problems.append(f'{path}: imageHeight/imageWidth missing or not positive integers')
            continue
        embedded = None
        if not osp.isfile(img_path):
            if not data.get('imageData'):
                problems.append(f'{path}: its image {img_rel!r} is not at {img_path} and the '
                                'file holds no imageData; put the image next to the json')
                continue
            embedded = base64.b64decode(data['imageData'])
            img_path = osp.splitext(path)[0] + (osp.splitext(img_rel)[1] or '.png')
        records.append(dict(json=path, img=img_path, embedded=embedded, h=h, w=w,
                            shapes=data.get('shapes') or []))
    if problems:
        head = f'{len(problems)} labelme file(s) cannot be converted:'
        raise SystemExit('error: ' + '\n  '.join([head] + problems))
    if not records:
        raise SystemExit(f'error: no labelme json files under {src}')
    labels = Counter(s.get('label') for r in records for s in r['shapes']
                     if (s.get('shape_type') or 'polygon') in SHAPES_AS_MASKS)
    if classes:
        unknown = sorted(str(n) for n in labels if n not in classes)
        if unknown:
            raise SystemExit(f'error: labels {unknown} are not in --classes {list(classes)}; '
                             'add them or fix the labels in labelme')
        names = list(classes)
    else:
        names = sorted(str(n) for n in labels)
    cat_id = {n: i + 1 for i, n in enumerate(names)}
    categories = [dict(id=cat_id[n], name=n, supercategory='') for n in names]
    rel = {r['img']: osp.relpath(r['img'], src) for r in records}
    val = _split(sorted(rel.values()), val_fraction, seed)
    splits: Dict[str, dict] = {s: dict(images=[], annotations=[], categories=categories)
                               for s in ('train', 'val')}
    skipped = Counter()
    for r in records:
        file_name = rel[r['img']].replace(os.sep, '/')
        split = splits['val' if file_name in val else 'train']
        image_id = len(split['images']) + 1
        split['images'].append(dict(id=image_id, file_name=file_name, height=r['h'],
                                    width=r['w']))
        dest = osp.join(out, 'images', file_name)
        os.makedirs(osp.dirname(dest), exist_ok=True)
        if r['embedded'] is not None:
            with open(dest, 'wb') as f:
                f.write(r['embedded'])
        elif symlink:
            os.symlink(osp.abspath(r['img']), dest)
        else:
            shutil.copy2(r['img'], dest)
        groups = defaultdict(list)
        for k, s in enumerate(r['shapes']):
            poly = _polygon(s)
            if poly is None:
                skipped[s.get('shape_type')] += 1
                continue
            if len(poly) < 6:
                warnings.append(f"{r['json']}: shape {k} ({s.get('label')}) has fewer than 3 "
                                'points, skipped')
                continue
            gid = s.get('group_id')
            groups[(s.get('label'), gid if gid is not None else f'shape{k}')].append(poly)
        for (label, _), polys in groups.items():
            ann = _instance(polys, r['h'], r['w'])
            ann.update(id=len(split['annotations']) + 1, image_id=image_id,
                       category_id=cat_id[label])
            split['annotations'].append(ann)
    for kind, n in skipped.items():
        warnings.append(f'{n} {kind} shape(s) skipped: only polygon, rectangle and circle '
                        'shapes become masks')
    os.makedirs(ann_dir, exist_ok=True)
    for s in ('train', 'val'):
        if s == 'val' and not val_fraction:
            continue
        with open(osp.join(ann_dir, f'{s}.json'), 'w') as f:
            json.dump(splits[s], f)
    return dict(classes=names, warnings=warnings,
                counts={s: (len(v['images']), len(v['annotations'])) for s, v in splits.items()})


def parse_args(argv=None):
    p = doc_parser(__doc__)
    p.add_argument('src', help='labelme folder (json files next to their images)')
    p.add_argument('out', help='output folder (gets annotations/ and images/)')
    p.add_argument('--val-fraction', type=float, default=0.2,
                   help='share of the images for val.json (0.2); 0 writes train.json only')
    p.add_argument('--seed', type=int, default=0, help='seed of the split (0)')
    p.add_argument('--classes', help='comma-separated class names in the order wanted '
                                     '(default: the labels found, sorted)')
    p.add_argument('--symlink', action='store_true',
                   help='link the images instead of copying them')
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    classes = [c.strip() for c in args.classes.split(',') if c.strip()] if args.classes else None
    done = convert(args.src, args.out, args.val_fraction, args.seed, classes, args.symlink)
    for w in done['warnings']:
        print(f'WARNING {w}')
    (nt, at), (nv, av) = done['counts']['train'], done['counts']['val']
    print(f'wrote {args.out}/annotations/train.json ({nt} images, {at} instances)'
          + (f' and val.json ({nv} images, {av} instances)' if args.val_fraction else '')
          + f'; classes: {", ".join(done["classes"])}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
