"""The checks of a COCO instance file (``annotations/train.json``) and its images, each
finding a :class:`~.checks.Problem` that names the file and the image or annotation id.

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
  missing-file, unreadable, truncated, corrupt   as for segmentation (:mod:`.checks`)
  image-size           json width/height differ from the image training decodes
  exif-rotation        ... because OpenCV turns the photo by its EXIF tag
  polygon              fewer than 3 points, an odd number of coordinates, zero area
  rle                  an RLE mask of another size than its image, or counts that do
                       not decode
  box-empty            a box under 1 pixel wide or high, or area <= 0
  box-outside          a box wholly outside its image
  no-mask              an annotation without a mask, for a model that trains masks
  box-only             no annotation has a mask, for a model that trains masks

Warnings: unused-category, category-order, box-partly-outside, empty-images,
exif-orientation (a tag that turns without swapping sides: check the annotations by eye).
"""
import json
import os.path as osp
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from numbers import Real
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .checks import EXIF_ROTATING, EXIF_SWAPPING, FileTally, Problem, parallel_map, read_file

__all__ = ['EXIF_TURNS', 'FASTER_RCNN_TEMPLATE', 'coco_classes', 'default_img_dir',
           'CocoCheck', 'check_coco_instances', 'class_table']

#: what a viewer (and OpenCV, which training decodes with) does to show each EXIF orientation
EXIF_TURNS = {2: 'mirrors it left-right', 3: 'turns it 180 degrees',
              4: 'mirrors it top-bottom', 5: 'mirrors it across its diagonal',
              6: 'turns it 90 degrees clockwise', 7: 'mirrors it across its anti-diagonal',
              8: 'turns it 90 degrees counter-clockwise'}
#: the box-only sibling of the instance templates
FASTER_RCNN_TEMPLATE = 'configs/custom/faster-rcnn_inline-swin-t_fpn_1xb4-36e_custom-coco.py'


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
    if not isinstance(coco, dict):
        found.problems.append(Problem('coco-json', ann_file, 'must hold a JSON object with '
                                                             '"images", "annotations", '
                                                             '"categories"'))
        return None
    missing = [k for k in ('images', 'annotations', 'categories')
               if not isinstance(coco.get(k), list)]
    if missing:
        found.problems.append(Problem(
            'coco-json', ann_file, f'has no {", ".join(repr(k) for k in missing)} list: a COCO '
                                   'instance file needs "images", "annotations" and '
                                   '"categories" (is it a COCO export? labelme folders: '
                                   'tools/dataset_converters/labelme2coco.py)'))
        return None
    return coco


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
    for i, a in enumerate(anns):
        if not isinstance(a, dict) or not _is_int(a.get('id')):
            P.append(Problem('coco-schema', ann_file, f'annotations[{i}] has no integer "id" '
                                                      f'(got {a!r})'[:300]))
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
            P.append(Problem('orphan-annotation', ann_file,
                             f'{where}: image_id {a.get("image_id")!r} is not in "images"'))
            continue
        where += f' (image {im["id"]}, {im["file_name"]})'
        cid = a.get('category_id')
        if not _is_int(cid) or cid not in declared:
            P.append(Problem('undeclared-category', ann_file,
                             f'{where}: category_id {cid!r} is not in "categories" (declared: '
                             f'{sorted(declared)[:20]}); mmdet drops it without a word'))
            continue
        bbox, area = a.get('bbox'), a.get('area')
        if not (isinstance(bbox, list) and len(bbox) == 4 and all(_is_num(v) for v in bbox)) \
                or not _is_num(area):
            P.append(Problem('coco-schema', ann_file,
                             f'{where}: needs "bbox": [x, y, width, height] and a numeric '
                             f'"area" (got bbox={bbox!r}, area={area!r})'))
            continue
        crowd = bool(a.get('iscrowd', 0))
        annotated.add(im['id'])
        used[cid] += 1
        class_images[cid].add(im['id'])
        stats = per_class[cid]
        stats['crowd' if crowd else 'instances'] += 1
        h, w = im['height'], im['width']
        x, y, bw, bh = bbox
        if bw < 1 or bh < 1 or area <= 0:
            P.append(Problem('box-empty', ann_file,
                             f'{where}: box {bbox} / area {area} is empty (under 1 pixel wide '
                             'or high, or area <= 0): mmdet drops it without a word; delete it '
                             'or draw it again'))
        elif x >= w or y >= h or x + bw <= 0 or y + bh <= 0:
            P.append(Problem('box-outside', ann_file,
                             f'{where}: box {bbox} lies wholly outside the {w}x{h} (WxH) image: '
                             'mmdet drops it without a word. A rotated photo or another '
                             'image size in the export?'))
        elif x < -1 or y < -1 or x + bw > w + 1 or y + bh > h + 1:
            W.append(Problem('box-partly-outside', ann_file,
                             f'{where}: box {bbox} reaches outside the {w}x{h} (WxH) image'))
        segm = a.get('segmentation')
        if not segm:
            without_mask += 1
            stats['no mask'] += 1
            continue
        with_mask += 1
        if isinstance(segm, list):
            stats['polygon'] += 1
            bad, total = [], 0.0
            for k, part in enumerate(segm):
                if not (isinstance(part, list) and all(_is_num(v) for v in part)):
                    bad.append(f'part {k} is not a list of numbers')
                elif len(part) % 2 or len(part) < 6:
                    bad.append(f'part {k} has {len(part)} coordinates (needs x, y pairs, '
                               'at least 3 points)')
                else:
                    total += _polygon_area(part)
            if bad:
                P.append(Problem('polygon', ann_file,
                                 f'{where}: {"; ".join(bad)}: mmdet drops such parts and ignores '
                                 'an instance left without one; fix or delete the polygon'))
            elif total <= 0:
                P.append(Problem('polygon', ann_file,
                                 f'{where}: the polygon encloses zero area (its points lie on '
                                 'a line): it masks nothing; fix or delete it'))
        elif isinstance(segm, dict):
            stats['RLE'] += 1
            why = _rle_problem(segm, h, w)
            if why:
                P.append(Problem('rle', ann_file, f'{where}: {why}'))
        else:
            P.append(Problem('coco-schema', ann_file,
                             f'{where}: "segmentation" must be a list of polygons or an RLE '
                             f'dict (got {type(segm).__name__})'))
    for cid, n in used.items():
        per_class[cid]['images'] = len(class_images[cid])
    found.per_class = dict(per_class)
    for c in found.categories:
        if c['id'] not in used:
            W.append(Problem('unused-category', ann_file,
                             f'category {c["id"]} {c["name"]!r} has no annotation: the model '
                             'gets a class it never sees; remove the category, or annotate it'))
    if task == 'instance' and anns and not with_mask and without_mask:
        P.append(Problem('box-only', ann_file,
                         f'none of its {without_mask} annotations has a mask ("segmentation"): '
                         'a box-only export. Mask R-CNN cannot train on it; use '
                         f'{FASTER_RCNN_TEMPLATE} (or export the masks too)'))
    elif task == 'instance' and without_mask:
        for a in anns:
            if isinstance(a, dict) and not a.get('segmentation') and \
                    _is_int(a.get('image_id')) and a['image_id'] in images:
                P.append(Problem('no-mask', ann_file,
                                 f'annotation {a.get("id")} (image {a["image_id"]}, '
                                 f'{images[a["image_id"]]["file_name"]}): no "segmentation": '
                                 'Mask R-CNN training stops with a KeyError when it reaches it; '
                                 'add its mask or delete it'))
    found.empty_images = [images[i]['file_name'] for i in images if i not in annotated]
    if found.empty_images:
        shown = ', '.join(found.empty_images[:5]) + (' ...' if len(found.empty_images) > 5 else '')
        W.append(Problem('empty-images', ann_file,
                         f'{len(found.empty_images)} of {len(images)} images have no annotation '
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
                                          f'under {found.img_dir}); copy it there or remove '
                                          'the image and its annotations'))
            continue
        found.tally.nbytes += read.nbytes
        if read.problems:
            found.problems += [p._replace(message=f'{p.message} ({of})') for p in read.problems]
            continue
        (h, w), o = read.size, read.orientation
        loaded = (w, h) if o in EXIF_SWAPPING else (h, w)
        listed = (im['height'], im['width'])
        if loaded == listed:
            if o in EXIF_ROTATING and o not in EXIF_SWAPPING:
                found.warnings.append(Problem(
                    'exif-orientation', path,
                    f'EXIF orientation {o}: training {EXIF_TURNS[o]} when it loads it, which '
                    'the sizes cannot confirm; check that the annotation tool showed it so'))
            continue
        if o in EXIF_SWAPPING and (h, w) == listed:
            found.problems.append(Problem(
                'exif-rotation', path,
                f'EXIF orientation {o}: training (OpenCV) {EXIF_TURNS[o]} and loads it as '
                f'{loaded[0]}x{loaded[1]} (HxW), but {of} says {listed[0]}x{listed[1]}: the '
                'annotations were drawn on the unturned pixels. Remove the orientation tag '
                'from a copy of the file (e.g. exiftool -Orientation=1 -n, or save the pixels '
                'again without EXIF) so that training sees what was annotated'))
        else:
            found.problems.append(Problem(
                'image-size', path,
                f'training loads it as {loaded[0]}x{loaded[1]} (HxW)'
                + (f' (EXIF orientation {o}: it {EXIF_TURNS[o]})' if o in EXIF_ROTATING else '')
                + f' but {of} says {listed[0]}x{listed[1]}: the file was resized or replaced '
                  'after annotating; export the annotations again or restore the image'))


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
    return found


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
