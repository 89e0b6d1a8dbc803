"""The checks of a COCO instance file (``annotations/train.json``) and its images, each
finding a :class:`~.problems.Problem` that names the file and the image or annotation id;
and :func:`check_coco`, the short summary of a COCO file (counts and what would break
training) that ``inline_mm.engine`` prints when a dataset comes out empty.

Used by ``tools/misc/check_dataset.py DATA/annotations/train.json`` (prints them, and a
table per class) and by ``DatasetCheckHook`` (the same rules before iteration 1). What
mmdet 3.3 does with each case, without these checks, is in the message.

Problems (training would crash, or silently learn from something else than the file says):

  coco-json            not JSON, not an object, no "images" / "annotations" / "categories"
  coco-schema          an entry without a key mmdet reads, or of the wrong type
  duplicate-id         two images, annotations or categories with one id
  duplicate-name       two categories with one name, two images with one file_name
  orphan-annotation    an annotation of an image id that "images" lacks
  undeclared-category  a category_id that "categories" lacks
  missing-file, unreadable, truncated, corrupt   as for segmentation (:mod:`.image_reading`)
  image-size           json width/height differ from the image training decodes
  exif-rotation        ... because OpenCV turns the photo by its EXIF tag; the message
                       says which frame the annotations fit (the turned photo or its
                       stored pixels: RLE sizes, polygon and box extents) and the fix
  polygon              fewer than 3 points, an odd number of coordinates, zero area
  rle                  an RLE mask of another size than its image, or counts that do
                       not decode
  box-empty            a box under 1 pixel wide or high, or area <= 0
  box-outside          a box wholly outside its image
  no-mask              an annotation without a mask, for a model that trains masks
  box-only             no annotation has a mask, for a model that trains masks

Warnings: unused-category, category-order, box-partly-outside, empty-images,
exif-orientation (a tag that turns without swapping sides: check the annotations by eye).

Each finding that a copy of the file can fix is also recorded as a :class:`Fix`
(``CocoCheck.fixes``): what ``tools/dataset_converters/coco_fix.py`` does about it on request
(:mod:`.coco_fixes`).
"""
import json
import os.path as osp
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from numbers import Real
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from .dataset_files import FileTally, parallel_map
from .image_reading import EXIF_ROTATING, EXIF_SWAPPING, read_file
from .problems import Problem

__all__ = ['EXIF_TURNS', 'FASTER_RCNN_TEMPLATE', 'FIXER', 'coco_classes', 'default_img_dir',
           'check_coco', 'Fix', 'CocoCheck', 'check_coco_instances', 'json_rules', 'class_table',
           'fixer_flags']

#: what a viewer (and OpenCV, which training decodes with) does to show each EXIF orientation
EXIF_TURNS = {2: 'mirrors it left-right', 3: 'turns it 180 degrees',
              4: 'mirrors it top-bottom', 5: 'mirrors it across its diagonal',
              6: 'turns it 90 degrees clockwise', 7: 'mirrors it across its anti-diagonal',
              8: 'turns it 90 degrees counter-clockwise'}
#: the box-only sibling of the instance templates
FASTER_RCNN_TEMPLATE = 'configs/custom/faster-rcnn_inline-swin-t_fpn_1xb4-36e_custom-coco.py'
#: the tool that applies the fixable findings to a copy (:mod:`.coco_fixes`)
FIXER = 'tools/dataset_converters/coco_fix.py'
#: annotation problems whose fix is to leave the annotation out (``--drop-bad-annotations``)
DROPPABLE = ('coco-schema', 'orphan-annotation', 'undeclared-category', 'box-empty',
             'box-outside', 'polygon', 'rle', 'no-mask')
#: image problems whose fix is to leave the image out (``--drop-bad-images``)
BAD_FILES = ('missing-file', 'unreadable', 'truncated', 'corrupt')


def default_img_dir(ann_file: str) -> str:
    """Where the images of ``DATA/annotations/x.json`` are: ``DATA/images``."""
    return osp.normpath(osp.join(osp.dirname(ann_file) or '.', '..', 'images'))


def coco_classes(ann_file: str) -> Tuple[str, ...]:
    """The class names of a COCO file in mmdet's label order: class ``i`` is the ``i``-th
    entry of its ``categories`` list (mmdet's ``CocoDataset`` and ``CocoMetric`` number the
    categories so; ids may be anything, e.g. 3, 7, 12). For configs: read when the config
    file is parsed, so that ``num_classes`` reaches the heads before a model is built.

    Raises:
        FileNotFoundError / ValueError: naming the file and what to do.
    """
    if not osp.isfile(ann_file):
        raise FileNotFoundError(
            f'{ann_file} not found: the config reads the class names from it. Put the '
            'annotations at DATA/annotations/train.json and point the config at DATA '
            '(INLINE_MM_DATA=DATA in the environment, or data_root in the config); '
            'docs/own_instances.md')
    try:
        with open(ann_file) as f:
            coco = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f'{ann_file} is not a readable JSON file ({e}); '
                         f'check it with: python tools/misc/check_dataset.py {ann_file}') from e
    cats = coco.get('categories') if isinstance(coco, dict) else None
    names = [c.get('name') for c in cats or [] if isinstance(c, dict)]
    if not names or not all(isinstance(n, str) and n for n in names) \
            or len(set(names)) != len(names):
        raise ValueError(f'{ann_file}: "categories" must list categories with distinct, '
                         f'non-empty names (got {names[:10]}); check it with: '
                         f'python tools/misc/check_dataset.py {ann_file}')
    return tuple(names)


def check_coco(ann_file: str, img_dir: Optional[str] = None) -> Dict:
    """Summarise a COCO annotation file and list what would break training.

    Args:
        ann_file (str): The ``instances_*.json`` file.
        img_dir (str, optional): Folder the ``file_name`` entries are relative to;
            when given, missing image files are listed. Default: None.

    Returns:
        dict: ``images``, ``annotations``, ``annotated_images`` (counts) and
        ``problems`` (list of :class:`Problem`, empty when the file is usable).
    """
    with open(ann_file) as f:
        try:
            coco = json.load(f)
        except json.JSONDecodeError as e:
            return dict(images=0, annotations=0, annotated_images=0,
                        problems=[Problem('coco', ann_file, f'is not valid JSON ({e})')])
    problems = []
    missing_keys = [k for k in ('images', 'annotations', 'categories') if k not in coco]
    if missing_keys:
        problems.append(Problem('coco', ann_file,
                                f'has no {", ".join(repr(k) for k in missing_keys)} list (a '
                                'COCO file needs "images", "annotations", "categories")'))
    images = coco.get('images') or []
    anns = coco.get('annotations') or []
    image_ids = {im.get('id') for im in images}
    cat_ids = {c.get('id') for c in coco.get('categories') or []}
    annotated = {a.get('image_id') for a in anns} & image_ids
    if not images:
        problems.append(Problem('coco', ann_file, 'lists no images'))
    elif not anns:
        problems.append(Problem('coco', ann_file,
                                f'has {len(images)} images but no annotations: training skips '
                                'images without annotations (filter_empty_gt), so nothing '
                                'would be left to train on'))
    elif not annotated:
        problems.append(Problem('coco', ann_file, 'no annotation refers to a listed image id'))
    orphans = sum(a.get('image_id') not in image_ids for a in anns)
    if orphans:
        problems.append(Problem('coco', ann_file, f'{orphans} annotation(s) refer to image ids '
                                                  'that are not in "images"'))
    bad_cats = sum(a.get('category_id') not in cat_ids for a in anns)
    if bad_cats and cat_ids:
        problems.append(Problem('coco', ann_file, f'{bad_cats} annotation(s) have a category_id '
                                                  'that is not in "categories"'))
    if img_dir is not None:
        for im in images:
            path = osp.join(img_dir, im.get('file_name', '?'))
            if not osp.isfile(osp.join(img_dir, im.get('file_name', ''))):
                problems.append(Problem('missing-file', path, 'image file not found'))
    return dict(images=len(images), annotations=len(anns),
                annotated_images=len(annotated), problems=problems)


class Fix(NamedTuple):
    """A finding that a copy of the file can fix: what the fixer does (``action``), for which
    problem or warning ``code``, to which image or annotation.

    Actions: ``sizes`` (``value``: the image's (height, width) as training loads it),
    ``turn`` (turn or mirror its annotations as OpenCV turns the photo; ``value``: the EXIF
    orientation), ``drop-image``, ``drop-annotation``, ``clip-box``, ``drop-category``
    (``value``: the category id).
    """
    action: str
    code: str
    image_id: Optional[int] = None
    ann_index: Optional[int] = None     # position in "annotations" (ids may repeat)
    ann_id: object = None
    value: object = None


class _Geometry(NamedTuple):
    """Where an annotation lies: its RLE's [height, width] (or None) and the extent of its
    box and polygons (x0, y0, x1, y1), for telling which image frame it was drawn on."""
    ann_id: object
    rle_size: Optional[tuple]
    extent: Tuple[float, float, float, float]


@dataclass
class CocoCheck:
    """What :func:`check_coco_instances` found."""
    ann_file: str
    img_dir: str
    problems: List[Problem] = field(default_factory=list)
    warnings: List[Problem] = field(default_factory=list)
    categories: List[dict] = field(default_factory=list)     # id, name, in list order
    per_class: Dict[int, Counter] = field(default_factory=dict)   # category id -> counts
    images: int = 0
    annotations: int = 0
    empty_images: List[str] = field(default_factory=list)
    tally: FileTally = field(default_factory=FileTally)
    fixes: List[Fix] = field(default_factory=list)
    geometry: Dict[int, List[_Geometry]] = field(default_factory=dict, repr=False)
    #: image id -> ((height, width) of the stored pixels, EXIF orientation), for the images
    #: whose EXIF tag turns them or whose json size differs from the loaded one
    frames: Dict[int, Tuple[Tuple[int, int], int]] = field(default_factory=dict, repr=False)
    #: problems that an image's size fix covers (its annotations' RLE sizes, boxes outside)
    covered: int = 0


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return isinstance(v, Real) and not isinstance(v, bool)


def _polygon_area(coords: Sequence[float]) -> float:
    xs, ys = coords[0::2], coords[1::2]
    n = len(xs)
    return abs(sum(xs[i] * ys[(i + 1) % n] - xs[(i + 1) % n] * ys[i] for i in range(n))) / 2


def _rle_problem(segm: dict, h: int, w: int) -> Optional[str]:
    size = segm.get('size')
    if not (isinstance(size, list) and len(size) == 2):
        return f'RLE mask has no "size": [height, width] (got {size!r})'
    if list(size) != [h, w]:
        return (f'RLE mask is {size[0]}x{size[1]} (HxW) but the image is {h}x{w} in "images": '
                'the mask belongs to another image size; export it again')
    counts = segm.get('counts')
    if isinstance(counts, list):
        if not all(_is_int(c) and c >= 0 for c in counts) or sum(counts) != h * w:
            return (f'uncompressed RLE counts sum to {sum(c for c in counts if _is_num(c))}, '
                    f'not height x width = {h * w}: the mask is cut or belongs to another '
                    'image')
        return None
    if not isinstance(counts, str):
        return ('RLE "counts" must be a list of run lengths or a string (got '
                f'{type(counts).__name__})')
    try:
        from pycocotools import mask as mask_utils
    except ImportError:         # without pycocotools the string form is not checked
        return None
    try:
        decoded = mask_utils.decode(dict(size=size, counts=counts.encode('ascii')))
    except Exception as e:
        return f'compressed RLE does not decode ({e})'
    if decoded.shape[:2] != (h, w):
        return f'compressed RLE decodes to {decoded.shape[0]}x{decoded.shape[1]}, not {h}x{w}'
    return None


def _count(n: int, noun: str) -> str:
    """``1 image``, ``2 images``."""
    return f'{n:,} {noun}' + ('s' if n != 1 else '')


def _record_geometry(found: CocoCheck, image_id: int, aid, bbox, segm):
    """Remember where an annotation lies (its box, polygon points, RLE size)."""
    x, y, bw, bh = bbox
    xs, ys = [x, x + bw], [y, y + bh]
    rle_size = None
    if isinstance(segm, list):
        for part in segm:
            if isinstance(part, list) and len(part) >= 2 and all(_is_num(v) for v in part):
                xs += part[0::2]
                ys += part[1::2]
    elif isinstance(segm, dict) and isinstance(segm.get('size'), list) \
            and len(segm['size']) == 2:
        rle_size = tuple(segm['size'])
    found.geometry.setdefault(image_id, []).append(
        _Geometry(aid, rle_size, (min(xs), min(ys), max(xs), max(ys))))


def _misfit(geometry: Sequence[_Geometry], h: int, w: int) -> Optional[str]:
    """Why the annotations cannot have been drawn on an ``h`` x ``w`` image (an RLE of
    another size, points well beyond its edges), or None if they all fit it."""
    for g in geometry:
        if g.rle_size is not None and list(g.rle_size) != [h, w]:
            return f'annotation {g.ann_id} has an RLE mask of {g.rle_size[0]}x{g.rle_size[1]}'
    # Tools round and overshoot by a pixel or two; another frame is off by far more.
    tol_x, tol_y = max(2., 0.02 * w), max(2., 0.02 * h)
    for g in geometry:
        x0, y0, x1, y1 = g.extent
        if x1 > w + tol_x or y1 > h + tol_y or x0 < -tol_x or y0 < -tol_y:
            return (f'annotation {g.ann_id} reaches ({x1:.0f}, {y1:.0f}) (x, y), beyond a '
                    f'{w}x{h} (WxH) image')
    return None


def _partly_outside(where: str, bbox, w: int, h: int, inside: float, aid) -> str:
    """The box-partly-outside warning: what mmdet does with such a box, and what to do."""
    share = f'only {100 * inside:.0f}% of it is inside' if inside < 0.5 else \
        f'{100 * inside:.0f}% of it is inside'
    return (f'{where}: box {bbox} reaches outside the {w}x{h} (WxH) image ({share}). mmdet '
            'clips it to the image when it resizes (Resize, clip_object_border=True) and '
            'trains on the part inside, box and mask alike. Fine if the object really '
            'continues beyond the edge; if not (drawn for another image size, or carelessly), '
            f'clip it in a copy ({FIXER} --clip-boxes) or leave it out (--drop-annotations '
            f'{aid})')


def _load(ann_file: str, found: CocoCheck) -> Optional[dict]:
    try:
        with open(ann_file) as f:
            coco = json.load(f)
    except OSError as e:
        found.problems.append(Problem('coco-json', ann_file, f'cannot be read ({e})'))
        return None
    except ValueError as e:
        found.problems.append(Problem('coco-json', ann_file, f'is not valid JSON ({e})'))
        return None
    return coco if _valid_top(coco, found) else None


def _valid_top(coco, found: CocoCheck) -> bool:
    """Whether ``coco`` is an object with the three lists (a coco-json problem if not)."""
    ann_file = found.ann_file
    if not isinstance(coco, dict):
        found.problems.append(Problem('coco-json', ann_file, 'must hold a JSON object with '
                                                             '"images", "annotations", '
                                                             '"categories"'))
        return False
    missing = [k for k in ('images', 'annotations', 'categories')
               if not isinstance(coco.get(k), list)]
    if missing:
        found.problems.append(Problem(
            'coco-json', ann_file, f'has no {", ".join(repr(k) for k in missing)} list: a COCO '
                                   'instance file needs "images", "annotations" and '
                                   '"categories" (is it a COCO export? labelme folders: '
                                   'tools/dataset_converters/labelme2coco.py)'))
        return False
    return True


def _json_rules(coco: dict, found: CocoCheck, task: str) -> Dict[int, dict]:
    """Every rule that needs only the file; returns the usable images by id."""
    ann_file, P, W = found.ann_file, found.problems, found.warnings
    # ---- categories
    cat_ids, names = Counter(), Counter()
    for i, c in enumerate(coco['categories']):
        if not (isinstance(c, dict) and _is_int(c.get('id')) and isinstance(c.get('name'), str)
                and c['name']):
            P.append(Problem('coco-schema', ann_file, f'categories[{i}] must have an integer '
                                                      f'"id" and a non-empty "name" (got {c!r})'))
            continue
        cat_ids[c['id']] += 1
        names[c['name']] += 1
        found.categories.append(dict(id=c['id'], name=c['name']))
    for cid, n in cat_ids.items():
        if n > 1:
            P.append(Problem('duplicate-id', ann_file, f'category id {cid} is declared {n} times'))
    for name, n in names.items():
        if n > 1:
            P.append(Problem('duplicate-name', ann_file,
                             f'category name {name!r} is declared {n} times: mmdet would give '
                             'its annotations two labels; merge them into one category'))
    ids = [c['id'] for c in found.categories]
    if ids != sorted(ids):
        W.append(Problem('category-order', ann_file,
                         f'categories are not listed by id ({ids[:10]}): labels follow the '
                         'list order (label i = i-th category), as in mmdet; this is fine, but '
                         'class tables and indices will follow that order'))
    # ---- images
    images: Dict[int, dict] = {}
    file_names = Counter()
    for i, im in enumerate(coco['images']):
        if not isinstance(im, dict) or not _is_int(im.get('id')):
            P.append(Problem('coco-schema', ann_file, f'images[{i}] has no integer "id" '
                                                      f'(got {im!r})'[:300]))
            continue
        bad = [k for k, ok in (('file_name', isinstance(im.get('file_name'), str)
                                and im.get('file_name')),
                               ('width', _is_int(im.get('width')) and im['width'] > 0),
                               ('height', _is_int(im.get('height')) and im['height'] > 0))
               if not ok]
        if bad:
            P.append(Problem('coco-schema', ann_file,
                             f'image id {im["id"]}: needs {", ".join(bad)} (a non-empty '
                             'file_name, positive integer width and height; got '
                             f'{ {k: im.get(k) for k in bad} })'))
            continue
        if im['id'] in images:
            P.append(Problem('duplicate-id', ann_file,
                             f'image id {im["id"]} is listed twice ({images[im["id"]]["file_name"]}'
                             f' and {im["file_name"]}); give every image its own id'))
            continue
        images[im['id']] = im
        file_names[im['file_name']] += 1
    for name, n in file_names.items():
        if n > 1:
            P.append(Problem('duplicate-name', ann_file,
                             f'file_name {name!r} is listed for {n} image ids: its annotations '
                             'are split between them; list each file once'))
    found.images = len(images)
    # ---- annotations
    declared = set(cat_ids)
    ann_ids, annotated, used = Counter(), set(), Counter()
    per_class: Dict[int, Counter] = defaultdict(Counter)
    class_images = defaultdict(set)
    with_mask = without_mask = 0
    anns = coco['annotations']
    found.annotations = len(anns)

    def bad(code: str, message: str, k: int, a, image_id=None):
        """An annotation problem whose fix is to leave the annotation out."""
        P.append(Problem(code, ann_file, message))
        found.fixes.append(Fix('drop-annotation', code, image_id, k,
                               a.get('id') if isinstance(a, dict) else None))

    for i, a in enumerate(anns):
        if not isinstance(a, dict) or not _is_int(a.get('id')):
            bad('coco-schema', f'annotations[{i}] has no integer "id" (got {a!r})'[:300], i, a)
            continue
        aid = a['id']
        ann_ids[aid] += 1
        if ann_ids[aid] == 2:
            P.append(Problem('duplicate-id', ann_file, f'annotation id {aid} is used more '
                                                       'than once; give every annotation its '
                                                       'own id (pycocotools keeps only one)'))
        im = images.get(a.get('image_id')) if _is_int(a.get('image_id')) else None
        where = f'annotation {aid}'
        if im is None:
            bad('orphan-annotation', f'{where}: image_id {a.get("image_id")!r} is not in '
                                     '"images"', i, a)
            continue
        where += f' (image {im["id"]}, {im["file_name"]})'
        cid = a.get('category_id')
        if not _is_int(cid) or cid not in declared:
            bad('undeclared-category', f'{where}: category_id {cid!r} is not in "categories" '
                                       f'(declared: {sorted(declared)[:20]}); mmdet drops it '
                                       'without a word', i, a, im['id'])
            continue
        bbox, area = a.get('bbox'), a.get('area')
        if not (isinstance(bbox, list) and len(bbox) == 4 and all(_is_num(v) for v in bbox)) \
                or not _is_num(area):
            bad('coco-schema', f'{where}: needs "bbox": [x, y, width, height] and a numeric '
                               f'"area" (got bbox={bbox!r}, area={area!r})', i, a, im['id'])
            continue
        crowd = bool(a.get('iscrowd', 0))
        annotated.add(im['id'])
        used[cid] += 1
        class_images[cid].add(im['id'])
        stats = per_class[cid]
        stats['crowd' if crowd else 'instances'] += 1
        h, w = im['height'], im['width']
        x, y, bw, bh = bbox
        segm = a.get('segmentation')
        _record_geometry(found, im['id'], aid, bbox, segm)
        if bw < 1 or bh < 1 or area <= 0:
            bad('box-empty', f'{where}: box {bbox} / area {area} is empty (under 1 pixel wide '
                             'or high, or area <= 0): mmdet drops it without a word', i, a,
                im['id'])
        elif x >= w or y >= h or x + bw <= 0 or y + bh <= 0:
            bad('box-outside', f'{where}: box {bbox} lies wholly outside the {w}x{h} (WxH) '
                               'image: mmdet drops it without a word. A rotated photo or '
                               'another image size in the export?', i, a, im['id'])
        elif x < -1 or y < -1 or x + bw > w + 1 or y + bh > h + 1:
            inside = ((min(x + bw, w) - max(x, 0)) * (min(y + bh, h) - max(y, 0))) / (bw * bh)
            W.append(Problem('box-partly-outside', ann_file, _partly_outside(
                where, bbox, w, h, inside, aid)))
            found.fixes.append(Fix('clip-box', 'box-partly-outside', im['id'], i, aid))
        if not segm:
            without_mask += 1
            stats['no mask'] += 1
            continue
        with_mask += 1
        if isinstance(segm, list):
            stats['polygon'] += 1
            faults, total = [], 0.0
            for k, part in enumerate(segm):
                if not (isinstance(part, list) and all(_is_num(v) for v in part)):
                    faults.append(f'part {k} is not a list of numbers')
                elif len(part) % 2 or len(part) < 6:
                    faults.append(f'part {k} has {len(part)} coordinates (needs x, y pairs, '
                                  'at least 3 points)')
                else:
                    total += _polygon_area(part)
            if faults:
                bad('polygon', f'{where}: {"; ".join(faults)}: mmdet drops such parts and '
                               'ignores an instance left without one', i, a, im['id'])
            elif total <= 0:
                bad('polygon', f'{where}: the polygon encloses zero area (its points lie on '
                               'a line): it masks nothing', i, a, im['id'])
        elif isinstance(segm, dict):
            stats['RLE'] += 1
            why = _rle_problem(segm, h, w)
            if why:
                bad('rle', f'{where}: {why}', i, a, im['id'])
        else:
            bad('coco-schema', f'{where}: "segmentation" must be a list of polygons or an RLE '
                               f'dict (got {type(segm).__name__})', i, a, im['id'])
    for cid, n in used.items():
        per_class[cid]['images'] = len(class_images[cid])
    found.per_class = dict(per_class)
    for c in found.categories:
        if c['id'] not in used:
            W.append(Problem('unused-category', ann_file,
                             f'category {c["id"]} {c["name"]!r} has no annotation: the model '
                             'gets a class it never sees; remove the category, or annotate it'))
            found.fixes.append(Fix('drop-category', 'unused-category', value=c['id']))
    if task == 'instance' and anns and not with_mask and without_mask:
        P.append(Problem('box-only', ann_file,
                         f'none of its {without_mask} annotations has a mask ("segmentation"): '
                         'a box-only export. Mask R-CNN cannot train on it; use '
                         f'{FASTER_RCNN_TEMPLATE} (or export the masks too)'))
    elif task == 'instance' and without_mask:
        for i, a in enumerate(anns):
            if isinstance(a, dict) and not a.get('segmentation') and \
                    _is_int(a.get('image_id')) and a['image_id'] in images and \
                    _is_int(a.get('category_id')) and a['category_id'] in declared:
                bad('no-mask', f'annotation {a.get("id")} (image {a["image_id"]}, '
                               f'{images[a["image_id"]]["file_name"]}): no "segmentation": '
                               'Mask R-CNN training stops with a KeyError when it reaches it; '
                               'add its mask', i, a, a['image_id'])
    found.empty_images = [images[i]['file_name'] for i in images if i not in annotated]
    if found.empty_images:
        shown = ', '.join(found.empty_images[:5]) + (' ...' if len(found.empty_images) > 5 else '')
        W.append(Problem('empty-images', ann_file,
                         f'{len(found.empty_images)} of {_count(len(images), "image")} '
                         f'{"has" if len(found.empty_images) == 1 else "have"} no annotation '
                         f'({shown}): training skips them (filter_empty_gt=True in the '
                         'template; set it to False to train on them as background), '
                         'validation scores them (any detection there is a false positive)'))
    if not images:
        P.append(Problem('coco-json', ann_file, 'lists no images'))
    elif not annotated:
        P.append(Problem('coco-json', ann_file, 'no usable annotation: nothing to train on'))
    return images


def _image_task(args):
    path, decode = args
    if not osp.isfile(path):
        return None
    return read_file(path, 'image', decode)


def _image_rules(images: Dict[int, dict], found: CocoCheck, decode: bool, jobs: int,
                 shard: Tuple[int, int], progress):
    rank, world_size = shard
    todo = [im for i, im in enumerate(images.values()) if i % world_size == rank]
    paths = [osp.join(found.img_dir, im['file_name']) for im in todo]
    reads = parallel_map(_image_task, [(p, decode) for p in paths], jobs, progress)
    for im, path, read in zip(todo, paths, reads):
        found.tally.images += 1
        of = f'image id {im["id"]} of {osp.basename(found.ann_file)}'
        if read is None:
            found.problems.append(Problem('missing-file', path,
                                          f'not found ({of}, file_name {im["file_name"]!r} '
                                          f'under {found.img_dir}); copy it there or leave '
                                          'the image out'))
            found.fixes.append(Fix('drop-image', 'missing-file', im['id']))
            continue
        found.tally.nbytes += read.nbytes
        if read.problems:
            found.problems += [p._replace(message=f'{p.message} ({of})') for p in read.problems]
            found.fixes += [Fix('drop-image', p.code, im['id']) for p in read.problems[:1]]
            continue
        (h, w), o = read.size, read.orientation
        loaded = (w, h) if o in EXIF_SWAPPING else (h, w)
        listed = (im['height'], im['width'])
        geometry = found.geometry.get(im['id'], [])
        if o in EXIF_ROTATING or loaded != listed:
            found.frames[im['id']] = ((h, w), o)
        if loaded == listed:
            if o in EXIF_ROTATING and o not in EXIF_SWAPPING:
                found.warnings.append(Problem(
                    'exif-orientation', path,
                    f'EXIF orientation {o}: training {EXIF_TURNS[o]} when it loads it, which '
                    'the sizes cannot confirm; check that the annotation tool showed it so '
                    f'(if it showed the stored pixels: {FIXER} --turn-annotations '
                    f'{im["file_name"]})'))
            continue
        if o in EXIF_SWAPPING and (h, w) == listed:
            found.problems.append(Problem('exif-rotation', path, _rotation_verdict(
                found, im, of, o, loaded, listed, geometry)))
        else:
            turn = f' (EXIF orientation {o}: it {EXIF_TURNS[o]})' if o in EXIF_ROTATING else ''
            head = (f'training loads it as {loaded[0]}x{loaded[1]} (HxW){turn} but {of} says '
                    f'{listed[0]}x{listed[1]}')
            wrong_listed = _misfit(geometry, *listed)
            if geometry and wrong_listed and not _misfit(geometry, *loaded):
                found.problems.append(Problem('image-size', path, (
                    f'{head}. Its annotations fit the image as it loads ({wrong_listed}): '
                    f'only the json\'s width/height are wrong; set them in a copy: {FIXER} '
                    '--fix-sizes')))
                found.fixes.append(Fix('sizes', 'image-size', im['id'], value=loaded))
            elif not geometry:
                found.problems.append(Problem('image-size', path, (
                    f'{head}; it has no annotations, so setting the json\'s width/height to '
                    f'the loaded size is safe: {FIXER} --fix-sizes')))
                found.fixes.append(Fix('sizes', 'image-size', im['id'], value=loaded))
            else:
                found.problems.append(Problem('image-size', path, (
                    f'{head}: the file was resized or replaced after annotating; export the '
                    'annotations again, restore the image, or leave it out')))


def _rotation_verdict(found: CocoCheck, im: dict, of: str, o: int, loaded, listed,
                      geometry) -> str:
    """The exif-rotation message for a photo whose json sizes are its stored pixels':
    which frame its annotations fit, and the fix for that frame (recorded in
    ``found.fixes``)."""
    head = (f'EXIF orientation {o}: training (OpenCV) {EXIF_TURNS[o]} and loads it as '
            f'{loaded[0]}x{loaded[1]} (HxW), but {of} says {listed[0]}x{listed[1]}, the size '
            'of its stored (unturned) pixels. ')
    name = im['file_name']
    if not geometry:
        found.fixes.append(Fix('sizes', 'exif-rotation', im['id'], value=loaded))
        return head + (f'It has no annotations: set its width/height to the turned size in a '
                       f'copy: {FIXER} --fix-sizes')
    not_turned, not_stored = _misfit(geometry, *loaded), _misfit(geometry, *listed)
    if not_stored and not not_turned:
        found.fixes.append(Fix('sizes', 'exif-rotation', im['id'], value=loaded))
        return head + (
            f'Its annotations fit the turned photo, not the stored pixels ({not_stored}): they '
            'were drawn on the photo as it is shown, and only the json\'s width/height are the '
            'stored ones. Fix: set them to '
            f'{loaded[1]}x{loaded[0]} (WxH) in a copy: {FIXER} --fix-sizes (do not strip the '
            'EXIF tag: the masks would then land beside the objects)')
    if not_turned and not not_stored:
        found.fixes.append(Fix('turn', 'exif-rotation', im['id'], value=o))
        return head + (
            f'Its annotations fit the stored pixels, not the turned photo ({not_turned}): the '
            'annotation tool showed it unturned. Fix: turn the '
            f'annotations as OpenCV turns the photo, in a copy: {FIXER} --turn-annotations '
            '(or strip the orientation tag from a copy of the image)')
    if not not_turned:
        return head + (
            'Its annotations fit both frames (they lie where the two overlap), so they cannot '
            'tell which one they were drawn on: look at the photo in the annotation tool. '
            f'Shown upright: {FIXER} --fix-sizes {name}; shown sideways: '
            f'--turn-annotations {name}')
    return head + (f'Its annotations fit neither frame ({not_stored}; {not_turned}): '
                   'export them again, or leave the image out')


def check_coco_instances(ann_file: str, img_dir: Optional[str] = None, decode: bool = True,
                         task: str = 'instance', jobs: int = 1, images: bool = True,
                         shard: Tuple[int, int] = (0, 1),
                         progress: Optional[Callable[[int, int], None]] = None) -> CocoCheck:
    """Check a COCO instance file and (with ``images``) its images.

    Args:
        ann_file (str): The json file.
        img_dir (str, optional): The folder ``file_name`` is relative to. Default: None
            (``DATA/images`` for ``DATA/annotations/x.json``).
        decode (bool): Decode every image in full (as for segmentation); False reads the
            headers only (sizes and EXIF are still checked). Default: True.
        task (str): ``'instance'`` (masks needed) or ``'detection'`` (boxes only).
        jobs (int): Decoding threads. Default: 1.
        images (bool): Read the images at all. Default: True.
        shard (tuple[int, int]): ``(rank, world_size)``: read every ``world_size``-th image
            from ``rank`` on (the file rules run in full everywhere). Default: ``(0, 1)``.
        progress (callable, optional): ``progress(done, total)`` while reading images.
    """
    if task not in ('instance', 'detection'):
        raise ValueError(f"task must be 'instance' or 'detection', got {task!r}")
    found = CocoCheck(ann_file, img_dir or default_img_dir(ann_file))
    coco = _load(ann_file, found)
    if coco is None:
        return found
    usable = _json_rules(coco, found, task)
    if images and usable:
        if not osp.isdir(found.img_dir):
            found.problems.append(Problem('missing-dir', found.img_dir,
                                          f'image folder of {ann_file} does not exist; give it '
                                          'with --img-dir DIR (file_name is relative to it)'))
        else:
            _image_rules(usable, found, decode, jobs, shard, progress)
            _frame_consequences(found)
    return found


def _frame_consequences(found: CocoCheck):
    """An image whose json size is wrong makes its annotations look wrong too (an RLE of
    "another" size, boxes outside): say so on those findings, and let the image's fix cover
    them instead of leaving them out."""
    framed = {f.image_id: f.code for f in found.fixes if f.action in ('sizes', 'turn')}
    if not framed:
        return
    follow = {}
    for f in found.fixes:
        if f.image_id in framed and f.code in ('rle', 'box-outside', 'box-partly-outside'):
            follow[(f.code, f'annotation {f.ann_id} (image {f.image_id},')] = framed[f.image_id]
    found.fixes = [f for f in found.fixes if not (
        f.image_id in framed and f.code in ('rle', 'box-outside', 'box-partly-outside'))]
    for records in (found.problems, found.warnings):
        for k, p in enumerate(records):
            for (code, prefix), cause in follow.items():
                if p.code == code and p.message.startswith(prefix):
                    found.covered += records is found.problems
                    records[k] = p._replace(message=(
                        f'{p.message} (this follows from its image\'s size in the json: '
                        f'{cause}, with the fix that covers it)'))
                    break


def json_rules(coco: dict, ann_file: str, task: str = 'instance') -> CocoCheck:
    """The rules that need only the json, on a loaded COCO dict (``ann_file`` names it in
    the findings): what :func:`check_coco_instances` finds without reading images."""
    found = CocoCheck(ann_file, '')
    if _valid_top(coco, found):
        _json_rules(coco, found, task)
    return found


#: the fixer's option for each kind of fix (tools/dataset_converters/coco_fix.py)
FIX_FLAGS = {'sizes': '--fix-sizes', 'turn': '--turn-annotations',
             'drop-image': '--drop-bad-images', 'drop-annotation': '--drop-bad-annotations',
             'clip-box': '--clip-boxes', 'drop-category': '--drop-unused-categories'}


def fixer_flags(found: CocoCheck) -> Tuple[List[str], List[str], int]:
    """The fixer's options for what was found: (options that fix problems, options for
    warnings only, the number of problems no option fixes)."""
    problem_codes = Counter(p.code for p in found.problems)
    fixed = Counter()
    errors, warnings = [], []
    order = list(FIX_FLAGS)
    for f in sorted(found.fixes, key=lambda f: order.index(f.action)):
        flag = FIX_FLAGS[f.action]
        if f.code in problem_codes:
            fixed[f.code] += 1
            if flag not in errors:
                errors.append(flag)
        elif flag not in warnings:
            warnings.append(flag)
    warnings = [w for w in warnings if w not in errors]
    left = sum(problem_codes.values()) - sum(fixed.values()) - found.covered
    return errors, warnings, max(0, left)


def class_table(found: CocoCheck) -> str:
    """The per-class summary: label, id, name, instances, crowd regions, images, masks."""
    head = ('label', 'id', 'name', 'instances', 'crowd', 'images', 'polygon', 'RLE', 'no mask')
    rows = [head]
    total = Counter()
    for label, c in enumerate(found.categories):
        s = found.per_class.get(c['id'], Counter())
        total.update(s)
        rows.append((str(label), str(c['id']), c['name'], *(str(s[k]) for k in head[3:])))
    rows.append(('', '', 'all', *(str(total[k]) if k != 'images' else
                                  str(found.images - len(found.empty_images))
                                  for k in head[3:])))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ['  '.join(v.ljust(wd) if i == 2 else v.rjust(wd)
                       for i, (v, wd) in enumerate(zip(r, widths))) for r in rows]
    return '\n'.join(lines[:1] + ['-' * len(lines[0])] + lines[1:])
