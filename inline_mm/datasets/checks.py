"""The data checks, in one place: every rule returns :class:`Problem` ``(code, path,
message)`` records; callers decide what to do with them.

Used by ``tools/check_dataset.py`` (reports all of them), :class:`SegFolderDataset`
(refuses what would break training), and ``inline_mm.engine``'s
``DatasetCheckHook`` / empty-dataset messages. Only numpy and Pillow are needed.

Problem codes (``message`` never repeats ``path``):

  missing-dir, empty-split        a split folder is missing or has no images
  unpaired-image, unpaired-mask   an image without its mask, a mask without its image
  duplicate-name                  two images with one stem (a.jpg and a.png) share a mask
  mask-format                     a mask that is not .png (JPEG changes label values)
  size-mismatch                   image and mask sizes differ
  exif-rotation                   a JPEG with an EXIF rotation: OpenCV (mmseg) rotates
                                  the image when loading, the mask is not rotated
  rgb-mask                        a colour (RGB) mask
  mask-mode                       another pixel format mmseg cannot use as labels
  label-out-of-range              label values >= num_classes other than ignore_index
  binary-0-255                    a 2-class set stored as 0/255 (255 is the ignore index)
  unreadable                      a file that cannot be opened
  missing-file                    a file a dataset lists but that is not on disk
  meta                            meta.json malformed or inconsistent
  coco                            a COCO annotation file that would break training
Warnings (same record): skipped-file (not an image), class-absent.
"""
import json
import os
import os.path as osp
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
from PIL import Image

__all__ = ['Problem', 'IMAGE_SUFFIXES', 'meta_problems', 'read_meta', 'SplitFiles',
           'scan_split', 'check_pair', 'label_problems', 'binary_problems', 'check_coco',
           'dataset_file_problems', 'image_size']

#: image extensions looked for by default (matched case-insensitively)
IMAGE_SUFFIXES = ('.jpg', '.jpeg', '.png', '.bmp', '.tif', '.tiff', '.webp')
#: EXIF orientations that OpenCV applies when decoding; 5-8 also swap width and height
EXIF_ROTATING = {2, 3, 4, 5, 6, 7, 8}
EXIF_SWAPPING = {5, 6, 7, 8}
#: Pillow modes whose pixel values are label indices
INDEX_MODES = {'L', 'P', 'I', 'I;16', 'I;16B', 'I;16L', '1'}


class Problem(NamedTuple):
    """One finding: a code (see the module docstring), the file or folder, what is wrong."""
    code: str
    path: str
    message: str

    def __str__(self) -> str:
        return f'{self.path}: {self.message}' if self.path else self.message


# ------------------------------------------------------------------ meta.json
def _classes_ok(meta) -> bool:
    classes = meta.get('classes') if isinstance(meta, dict) else None
    return (isinstance(classes, list) and len(classes) >= 2
            and all(isinstance(c, str) and c for c in classes))


def meta_problems(meta, path: str = '') -> List[Problem]:
    """What is wrong with a parsed ``{"classes": [...], "palette": [[r, g, b], ...]}``."""
    if not _classes_ok(meta):
        got = meta.get('classes') if isinstance(meta, dict) else meta
        return [Problem('meta', path, 'must be a JSON object whose "classes" lists at least two '
                                      'non-empty names, e.g. {"classes": ["background", "road"]} '
                                      f'(got {got!r})')]
    classes = meta['classes']
    found = []
    if len(set(classes)) != len(classes):
        dup = [c for c, n in Counter(classes).items() if n > 1]
        found.append(Problem('meta', path, f'class names must be unique; repeated: {dup}'))
    palette = meta.get('palette')
    if palette is not None:
        if not (isinstance(palette, list) and all(
                isinstance(p, list) and len(p) == 3
                and all(isinstance(v, int) and 0 <= v <= 255 for v in p) for p in palette)):
            found.append(Problem('meta', path, '"palette" must be a list of [r, g, b] with '
                                               'integers 0..255'))
        elif len(palette) != len(classes):
            found.append(Problem('meta', path, f'"palette" has {len(palette)} colours for '
                                               f'{len(classes)} classes; give one colour per '
                                               'class'))
    return found


def read_meta(path: str) -> Tuple[Optional[dict], List[Problem]]:
    """``(meta, problems)`` of a metadata file; ``meta`` is None when the file is
    missing (not a problem here: callers decide) or has no usable class list."""
    if not osp.isfile(path):
        return None, []
    try:
        with open(path) as f:
            meta = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        return None, [Problem('meta', path, f'cannot read it as JSON ({e})')]
    return (meta if _classes_ok(meta) else None), meta_problems(meta, path)


# ------------------------------------------------------------------ folders
def _walk(folder: str) -> List[str]:
    """Relative paths of all files under ``folder``, sorted, hidden files skipped."""
    out = []
    for dirpath, dirnames, files in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith('.'))
        out += [osp.relpath(osp.join(dirpath, f), folder) for f in files
                if not f.startswith('.')]
    return sorted(out)


@dataclass
class SplitFiles:
    """The files of one split, paired by stem (relative path without extension)."""
    images: Dict[str, str] = field(default_factory=dict)       # stem -> image path
    masks: Dict[str, str] = field(default_factory=dict)        # stem -> mask path (mask_suffix)
    problems: List[Problem] = field(default_factory=list)
    warnings: List[Problem] = field(default_factory=list)

    @property
    def pairs(self) -> List[Tuple[str, str]]:
        """``(image, mask)`` paths of the stems that have both, sorted by stem."""
        return [(self.images[s], self.masks[s]) for s in sorted(set(self.images) & set(self.masks))]


def scan_split(img_dir: str, mask_dir: Optional[str], img_suffixes: Sequence[str] = IMAGE_SUFFIXES,
               mask_suffix: str = '.png', name: str = '') -> SplitFiles:
    """Pair the images of ``img_dir`` with the masks of ``mask_dir`` by stem.

    Args:
        img_dir (str): Image folder (searched recursively; hidden files skipped).
        mask_dir (str, optional): Mask folder; None for images without masks.
        img_suffixes (Sequence[str]): Image extensions, case-insensitive.
        mask_suffix (str): Mask extension. Default: ``'.png'``.
        name (str): The split's name, for messages. Default: ``''``.
    """
    found = SplitFiles()
    suffixes = tuple(s.lower() for s in img_suffixes)
    folders = [img_dir] + ([mask_dir] if mask_dir is not None else [])
    for folder in folders:
        if not osp.isdir(folder):
            found.problems.append(Problem('missing-dir', folder,
                                          f'{name} split folder does not exist'.lstrip()))
    if found.problems:
        return found
    for rel in _walk(img_dir):
        stem, ext = osp.splitext(rel)
        path = osp.join(img_dir, rel)
        if ext.lower() not in suffixes:
            found.warnings.append(Problem('skipped-file', path, f'not an image '
                                                                f'({", ".join(suffixes)}); '
                                                                'training ignores it'))
            continue
        if stem in found.images:
            found.problems.append(Problem(
                'duplicate-name', path, f'{osp.basename(found.images[stem])} has the same name: '
                                        f'both would use mask {stem}{mask_suffix}; rename one'))
            continue
        found.images[stem] = path
    if not found.images:
        found.problems.append(Problem('empty-split', img_dir,
                                      f'no images ({", ".join(suffixes)}): an empty {name} split '
                                      'cannot be trained or scored'.replace('  ', ' ')))
    if mask_dir is None:
        return found
    other_masks: Dict[str, str] = {}
    for rel in _walk(mask_dir):
        stem, ext = osp.splitext(rel)
        (found.masks if ext == mask_suffix else other_masks)[stem] = osp.join(mask_dir, rel)
    for stem, path in other_masks.items():
        if stem in found.masks:
            continue
        hint = (' JPEG compression changes label values: export the masks losslessly as PNG'
                if osp.splitext(path)[1].lower() in ('.jpg', '.jpeg') else '')
        found.problems.append(Problem('mask-format', path,
                                      f'masks must be {mask_suffix} files, so this one is not '
                                      f'found for its image.{hint}'))
    for stem, path in found.images.items():
        if stem not in found.masks and stem not in other_masks:
            found.problems.append(Problem('unpaired-image', path,
                                          f'no mask {stem}{mask_suffix} in {mask_dir}'))
    for stem, path in found.masks.items():
        if stem not in found.images:
            found.problems.append(Problem('unpaired-mask', path,
                                          f'no image named {stem}.* in {img_dir}'))
    return found


# ------------------------------------------------------------------ image / mask pairs
def image_size(path: str) -> Tuple[int, int]:
    """(height, width) from the file header (no decoding)."""
    with Image.open(path) as im:
        return im.height, im.width


def _exif_orientation(im: Image.Image) -> int:
    try:
        return int(im.getexif().get(0x0112, 1) or 1)
    except Exception:           # a corrupt EXIF block is not ours to diagnose
        return 1


def check_pair(img_path: str, mask_path: str, read_labels: bool = True
               ) -> Tuple[List[Problem], Optional[Dict[int, int]]]:
    """Check an image and its mask: readable, same size, upright, a label mask.

    Returns:
        tuple: ``(problems, histogram)``; ``histogram`` maps label value -> pixels
        (None when the mask is not a usable label mask or ``read_labels`` is False).
    """
    try:
        with Image.open(img_path) as im:
            img_size, orientation = im.size, _exif_orientation(im)
    except Exception as e:
        return [Problem('unreadable', img_path, f'cannot open the image ({e})')], None
    try:
        with Image.open(mask_path) as mk:
            mode, mask_size = mk.mode, mk.size
            arr = (np.asarray(mk) if read_labels and mode in INDEX_MODES | {'RGB', 'RGBA'}
                   else None)
    except Exception as e:
        return [Problem('unreadable', mask_path, f'cannot open the mask ({e})')], None
    problems = []
    (iw, ih), (mw, mh) = img_size, mask_size
    if orientation in EXIF_ROTATING:
        lw, lh = (ih, iw) if orientation in EXIF_SWAPPING else (iw, ih)
        problems.append(Problem(
            'exif-rotation', img_path,
            f'EXIF orientation {orientation}: OpenCV (mmseg) rotates this image when loading it '
            f'(to {lh}x{lw}, HxW), but not its mask. Save the pixels upright without the tag '
            '(e.g. PIL ImageOps.exif_transpose) and make sure the mask matches them'))
    elif img_size != mask_size:
        problems.append(Problem('size-mismatch', mask_path,
                                f'mask is {mh}x{mw} (HxW) but its image {img_path} is '
                                f'{ih}x{iw}: a mask must label every pixel of its image'))
    if not read_labels:
        return problems, None
    if mode in ('RGB', 'RGBA'):
        grey = bool((arr[..., 0] == arr[..., 1]).all() and (arr[..., 1] == arr[..., 2]).all())
        how = ('its three channels are equal, a grey index mask saved as RGB: '
               'tools/convert_masks.py --gray' if grey else
               'map colours to class indices with tools/convert_masks.py (palette from '
               'meta.json)')
        problems.append(Problem('rgb-mask', mask_path, f'colour ({mode}) mask; masks must hold '
                                                       f'one class index per pixel: {how}'))
        return problems, None
    if arr is None:
        problems.append(Problem('mask-mode', mask_path,
                                f'pixel format {mode} is not a label mask; save one class index '
                                'per pixel as an 8-bit grey or palette PNG'))
        return problems, None
    values, counts = np.unique(arr.astype(np.int64) if arr.dtype == bool else arr,
                               return_counts=True)
    return problems, dict(zip(values.tolist(), counts.tolist()))


def label_problems(histograms: Dict[str, Dict[int, int]], num_classes: int, ignore_index: int,
                   reduce_zero_label: bool) -> List[Problem]:
    """``label-out-of-range`` for every mask (path -> label histogram)."""
    max_label = num_classes if reduce_zero_label else num_classes - 1
    found = []
    for mask_path, h in histograms.items():
        bad = {v: n for v, n in h.items() if v > max_label and v != ignore_index}
        if not bad:
            continue
        shown = ', '.join(f'{v} ({n} px)' for v, n in sorted(bad.items())[:8])
        valid = (f'1..{max_label} (0 = unlabelled)' if reduce_zero_label
                 else f'0..{max_label}')
        found.append(Problem('label-out-of-range', mask_path,
                             f'label values {shown}: valid are {valid} and the ignore index '
                             f'{ignore_index}; fix the mask or num_classes'))
    return found


def binary_problems(histograms: Dict[str, Dict[int, int]], num_classes: int, ignore_index: int,
                    reduce_zero_label: bool) -> List[Problem]:
    """0/255 masks: no mask anywhere has a foreground label, and some hold 255 (their
    values need no other report: same cause)."""
    if reduce_zero_label:
        return []
    has_fg = any(0 < v < num_classes for h in histograms.values() for v in h)
    with_255 = [p for p, h in histograms.items() if 255 in h and set(h) <= {0, 255}]
    if has_fg or not with_255:
        return []
    fg = '1' if num_classes == 2 else f'1..{num_classes - 1}'
    fix = ('convert them with tools/convert_masks.py (meta.json palette [[0,0,0],'
           '[255,255,255]]) or save the foreground as 1')
    return [Problem('binary-0-255', path,
                    f'mask holds only 0 and 255 and no mask of the dataset holds a label {fg}: '
                    f'255 is the ignore index ({ignore_index}) or out of range, so the '
                    f'foreground would never be learned; {fix}') for path in with_255]


# ------------------------------------------------------------------ COCO files
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


# ------------------------------------------------------------------ built datasets
def dataset_file_problems(dataset, check_sizes: bool = True) -> List[Problem]:
    """Problems with the files a built mmengine dataset refers to.

    Checks that every ``img_path`` (and ``seg_map_path``, when present) exists and,
    with ``check_sizes``, that a segmentation mask has its image's size (read from
    the file headers). EXIF rotations are not applied here; ``tools/check_dataset.py``
    reports those.

    Args:
        dataset: A built dataset with ``get_data_info`` (mmdet/mmseg datasets).
        check_sizes (bool): Compare image and mask sizes. Default: True.
    """
    problems = []
    for i in range(len(dataset)):
        info = dataset.get_data_info(i)
        img = info.get('img_path')
        seg = info.get('seg_map_path')
        img_ok = img is None or osp.isfile(img)
        if not img_ok:
            problems.append(Problem('missing-file', img, 'image file not found'))
        if seg is not None and not osp.isfile(seg):
            problems.append(Problem('missing-file', seg, f'mask file not found (for {img})'))
        elif seg is not None and img_ok and img is not None and check_sizes:
            try:
                img_hw, seg_hw = image_size(img), image_size(seg)
            except OSError as e:
                problems.append(Problem('unreadable', seg, f'cannot read it or {img}: {e}'))
                continue
            if img_hw != seg_hw:
                problems.append(Problem('size-mismatch', seg,
                                        f'mask is {seg_hw[0]}x{seg_hw[1]} (HxW) but its image '
                                        f'{img} is {img_hw[0]}x{img_hw[1]}: a mask must label '
                                        'every pixel of its image'))
    return problems
