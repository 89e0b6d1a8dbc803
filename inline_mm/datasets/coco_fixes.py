"""Apply the fixable findings of the COCO checks (:mod:`.coco_checks`) to a copy of the file.

``tools/dataset_converters/coco_fix.py`` reads an export, checks it, applies the fixes asked
for and writes a new json (never the export itself); :func:`fix_coco` does the work on the
loaded dict. Each fix is one the checker proposes for a finding (``CocoCheck.fixes``):

=========================  ========================================================
``sizes``                  width/height := the size training loads (EXIF turn applied),
                           for images whose annotations fit that frame
``turn``                   turn or mirror the annotations (polygons, boxes, RLE) as OpenCV
                           turns the photo, and set width/height to match, for photos
                           annotated on their stored (unturned) pixels
``drop-image``             leave out an image (and its annotations) whose file is
                           missing or does not decode, or one named
``drop-annotation``        leave out an annotation with a problem, or one named
``clip-box``               clip a box that reaches outside its image to the image
``drop-category``          leave out a category no annotation uses
=========================  ========================================================

The annotation fixes are decided on the file as it is after the image fixes (an RLE of
"another size" on a photo whose width/height were wrong is fine once they are set).
"""
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .image_reading import EXIF_ROTATING, EXIF_SWAPPING
from .coco_checks import EXIF_TURNS, CocoCheck, json_rules

__all__ = ['FixRequest', 'fix_coco', 'orient_point', 'orient_mask', 'turn_annotation']


# ------------------------------------------------------------------ EXIF orientations
def orient_point(orientation: int, height: int, width: int) -> Callable:
    """``f(x, y) -> (x', y')``: a point of the stored ``height`` x ``width`` pixels, in the
    image as a viewer (and OpenCV) shows it under EXIF ``orientation`` (continuous
    coordinates, pixel edges at integers, as COCO's)."""
    h, w = height, width
    return {1: lambda x, y: (x, y),
            2: lambda x, y: (w - x, y),             # mirrored left-right
            3: lambda x, y: (w - x, h - y),         # 180 degrees
            4: lambda x, y: (x, h - y),             # mirrored top-bottom
            5: lambda x, y: (y, x),                 # across the diagonal
            6: lambda x, y: (h - y, x),             # 90 degrees clockwise
            7: lambda x, y: (h - y, w - x),         # across the anti-diagonal
            8: lambda x, y: (y, w - x)}[orientation]   # 90 degrees counter-clockwise


def orient_mask(mask: np.ndarray, orientation: int) -> np.ndarray:
    """A stored ``(H, W, ...)`` array as shown under EXIF ``orientation`` (as
    :func:`orient_point` moves pixel centres)."""
    return {1: lambda m: m, 2: lambda m: m[:, ::-1], 3: lambda m: m[::-1, ::-1],
            4: lambda m: m[::-1], 5: lambda m: m.swapaxes(0, 1),
            6: lambda m: np.rot90(m, -1), 7: lambda m: m[::-1, ::-1].swapaxes(0, 1),
            8: lambda m: np.rot90(m, 1)}[orientation](mask)


def turn_annotation(ann: dict, orientation: int, stored_hw: Tuple[int, int]) -> dict:
    """``ann`` drawn on the stored pixels (``stored_hw``), moved to the photo as OpenCV loads
    it under EXIF ``orientation``: polygons point by point, the box from its turned corners,
    an RLE mask decoded, turned and encoded again in its own form (compressed or not).
    Areas do not change. Returns a new dict."""
    from pycocotools import mask as mask_utils
    from .coco_resize import uncompressed_rle
    h, w = stored_hw
    move = orient_point(orientation, h, w)
    ann = dict(ann)
    x, y, bw, bh = ann['bbox']
    corners = [move(cx, cy) for cx in (x, x + bw) for cy in (y, y + bh)]
    xs, ys = [c[0] for c in corners], [c[1] for c in corners]
    ann['bbox'] = [min(xs), min(ys), max(xs) - min(xs), max(ys) - min(ys)]
    segm = ann.get('segmentation')
    if isinstance(segm, list):
        ann['segmentation'] = [
            [v for k in range(0, len(part) - 1, 2) for v in move(part[k], part[k + 1])]
            for part in segm]
    elif isinstance(segm, dict):
        compressed = isinstance(segm['counts'], str)
        rle = dict(segm, counts=segm['counts'].encode('ascii')) if compressed else \
            mask_utils.frPyObjects(segm, h, w)
        mask = np.ascontiguousarray(orient_mask(mask_utils.decode(rle), orientation))
        if compressed:
            out = mask_utils.encode(np.asfortranarray(mask))
            ann['segmentation'] = dict(size=out['size'], counts=out['counts'].decode('ascii'))
        else:
            ann['segmentation'] = uncompressed_rle(mask)
    return ann


# ------------------------------------------------------------------ the fixes
@dataclass
class FixRequest:
    """Which fixes to apply. ``sizes`` and ``turn``: None (no), ``[]`` (every image the
    check proposes it for) or file names (these images, e.g. where the annotations fit
    both frames and the user looked)."""
    sizes: Optional[Sequence[str]] = None
    turn: Optional[Sequence[str]] = None
    drop_images: Sequence[str] = ()
    drop_bad_images: bool = False
    drop_annotations: Sequence[int] = ()
    drop_bad_annotations: bool = False
    clip_boxes: bool = False
    drop_unused_categories: bool = False
    categories_from: Optional[List[dict]] = None     # another file's "categories"

    def any(self) -> bool:
        return any((self.sizes is not None, self.turn is not None, self.drop_images,
                    self.drop_bad_images, self.drop_annotations, self.drop_bad_annotations,
                    self.clip_boxes, self.drop_unused_categories,
                    self.categories_from is not None))


def _where(im: dict) -> str:
    return f'image {im["id"]} ({im["file_name"]})'


def _ann_where(a, k: int, images: Dict[int, dict]) -> str:
    aid = a.get('id') if isinstance(a, dict) else None
    im = images.get(a.get('image_id')) if isinstance(a, dict) else None
    return (f'annotation {aid if aid is not None else f"[{k}]"}'
            + (f' of {_where(im)}' if im else ''))


def _frame(found: CocoCheck, im: dict, action: str):
    """((stored h, w), orientation) of a named image for ``action``, or ValueError."""
    if im['id'] not in found.frames:
        raise ValueError(f'{im["file_name"]}: its json size is the loaded one and no EXIF tag '
                         f'turns it: nothing for {action} to do')
    stored, o = found.frames[im['id']]
    if action == '--turn-annotations' and o not in EXIF_ROTATING:
        raise ValueError(f'{im["file_name"]}: no EXIF tag turns it: nothing to turn')
    return stored, o


def _image_fixes(coco: dict, found: CocoCheck, req: FixRequest, log: List[str]):
    images = {im['id']: im for im in coco['images'] if isinstance(im, dict) and 'id' in im}
    by_name = {im.get('file_name'): im for im in images.values()}

    def named(names, flag):
        unknown = sorted(set(names) - set(by_name))
        if unknown:
            raise ValueError(f'{flag}: the file lists no image with file_name {unknown}')
        return [by_name[n] for n in names]

    drop = {im['id']: 'named (--drop-images)' for im in named(req.drop_images, '--drop-images')}
    if req.drop_bad_images:
        drop.update({f.image_id: f.code for f in found.fixes
                     if f.action == 'drop-image' and f.image_id not in drop})
    if drop:
        left_out = Counter(a.get('image_id') for a in coco['annotations']
                           if isinstance(a, dict) and a.get('image_id') in drop)
        coco['images'] = [im for im in coco['images'] if im.get('id') not in drop]
        coco['annotations'] = [a for a in coco['annotations']
                               if not (isinstance(a, dict) and a.get('image_id') in drop)]
        for i, why in drop.items():
            log.append(f'{_where(images[i])}: left out with its {left_out[i]} '
                       f'annotation(s) ({why})')
    # sizes and turns
    todo: Dict[int, Tuple[str, str]] = {}
    for flag, action, names in (('--fix-sizes', 'sizes', req.sizes),
                                ('--turn-annotations', 'turn', req.turn)):
        if names is None:
            continue
        if names:
            for im in named(names, flag):
                _frame(found, im, flag)
                todo[im['id']] = (action, 'named')
        else:
            todo.update({f.image_id: (action, f.code) for f in found.fixes
                         if f.action == action and f.image_id not in todo})
    anns_of: Dict[int, List[int]] = {}
    for k, a in enumerate(coco['annotations']):
        if isinstance(a, dict):
            anns_of.setdefault(a.get('image_id'), []).append(k)
    for i, (action, why) in todo.items():
        if i in drop:
            continue
        im = images[i]
        (h, w), o = found.frames[i]
        loaded = (w, h) if o in EXIF_SWAPPING else (h, w)
        old = f'{im["width"]}x{im["height"]}'
        if action == 'turn':
            for k in anns_of.get(i, []):
                coco['annotations'][k] = turn_annotation(coco['annotations'][k], o, (h, w))
            log.append(f'{_where(im)}: {len(anns_of.get(i, []))} annotation(s) moved as OpenCV '
                       f'{EXIF_TURNS[o].replace("it ", "the photo ", 1)} (EXIF orientation {o}'
                       f'; {why}), width x height {old} -> {loaded[1]}x{loaded[0]}')
        else:
            log.append(f'{_where(im)}: width x height {old} -> {loaded[1]}x{loaded[0]}, the '
                       f'size training loads ({why})')
        im['height'], im['width'] = loaded


def _annotation_fixes(coco: dict, req: FixRequest, ann_file: str, task: str,
                      log: List[str]):
    known = {a.get('id') for a in coco['annotations'] if isinstance(a, dict)}
    unknown = sorted(set(req.drop_annotations) - known)
    if unknown:
        raise ValueError(f'--drop-annotations: the file has no annotation with id {unknown}')
    found = json_rules(coco, ann_file, task)
    drop: Dict[int, str] = {k: 'named (--drop-annotations)'
                            for k, a in enumerate(coco['annotations'])
                            if isinstance(a, dict) and a.get('id') in set(req.drop_annotations)}
    if req.drop_bad_annotations:
        for f in found.fixes:
            if f.action == 'drop-annotation' and f.ann_index not in drop:
                drop[f.ann_index] = f.code
    images = {im['id']: im for im in coco['images'] if isinstance(im, dict) and 'id' in im}
    if req.clip_boxes:
        for f in found.fixes:
            if f.action != 'clip-box' or f.ann_index in drop:
                continue
            a, im = coco['annotations'][f.ann_index], images[f.image_id]
            x, y, bw, bh = a['bbox']
            x0, y0 = max(x, 0), max(y, 0)
            x1, y1 = min(x + bw, im['width']), min(y + bh, im['height'])
            a['bbox'] = [x0, y0, x1 - x0, y1 - y0]
            log.append(f'{_ann_where(a, f.ann_index, images)}: box [{x:g}, {y:g}, {bw:g}, '
                       f'{bh:g}] clipped to the {im["width"]}x{im["height"]} image: '
                       f'[{x0:g}, {y0:g}, {x1 - x0:g}, {y1 - y0:g}]')
    for k in sorted(drop):
        log.append(f'{_ann_where(coco["annotations"][k], k, images)}: left out ({drop[k]})')
    coco['annotations'] = [a for k, a in enumerate(coco['annotations']) if k not in drop]


def _category_fixes(coco: dict, req: FixRequest, log: List[str]):
    if req.categories_from is not None:
        target = [dict(c) for c in req.categories_from]
        names = {c['id']: c['name'] for c in target}
        clash = [(c['id'], c['name'], names[c['id']]) for c in coco['categories']
                 if c['id'] in names and c['name'] != names[c['id']]]
        if clash:
            raise ValueError('--categories-from: the files name one id differently '
                             f'(id, here, there): {clash[:10]}; they are not the same '
                             'categories')
        gone = [c for c in coco['categories'] if c['id'] not in names]
        n = len(coco['annotations'])
        coco['annotations'] = [a for a in coco['annotations'] if a.get('category_id') in names]
        for c in gone:
            log.append(f'category {c["id"]} {c["name"]!r}: left out (not in --categories-from)')
        if n != len(coco['annotations']):
            log.append(f'{n - len(coco["annotations"])} annotation(s) of those categories '
                       'left out')
        if [c['id'] for c in coco['categories']] != [c['id'] for c in target]:
            log.append('categories: now those of --categories-from, in its order '
                       f'({", ".join(c["name"] for c in target)})')
        coco['categories'] = target
    elif req.drop_unused_categories:
        used = {a.get('category_id') for a in coco['annotations']}
        for c in coco['categories']:
            if c['id'] not in used:
                log.append(f'category {c["id"]} {c["name"]!r}: left out (no annotation uses '
                           'it; the labels of the categories after it move up by one)')
        coco['categories'] = [c for c in coco['categories'] if c['id'] in used]


def fix_coco(coco: dict, found: CocoCheck, request: FixRequest,
             task: str = 'instance') -> Tuple[dict, List[str]]:
    """Apply ``request`` to a copy of ``coco``, the file that ``found`` (the result of
    :func:`~.coco_checks.check_coco_instances` on it) describes.

    Image fixes come first (left-out images, sizes, turned annotations); the annotation
    fixes (``drop_bad_annotations``, ``clip_boxes``) then follow the json rules on the file
    as it is by then; categories last.

    Returns:
        tuple: the fixed dict and one line per change.

    Raises:
        ValueError: a named image or annotation the file lacks, a named image the fix does
            not apply to, categories that clash with ``categories_from``.
    """
    import copy
    if request.categories_from is not None and request.drop_unused_categories:
        raise ValueError('--categories-from sets the categories; --drop-unused-categories '
                         'would then drop some of them again: give one of the two')
    coco = copy.deepcopy(coco)
    log: List[str] = []
    _image_fixes(coco, found, request, log)
    _annotation_fixes(coco, request, found.ann_file, task, log)
    _category_fixes(coco, request, log)
    return coco, log
