"""The checks of a segmentation folder (``img_dir`` / ``ann_dir`` split folders and
``meta.json``): the metadata (:func:`read_meta`), images paired with their masks by name
(:func:`scan_split`), one image and its mask (:func:`check_pair`) and the label values of all
masks (:func:`label_problems`, :func:`binary_problems`). ``tools/misc/check_dataset.py``
reports them all; :class:`SegFolderDataset` refuses what would break training.
"""
import json
import os
import os.path as osp
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from .image_reading import EXIF_ROTATING, EXIF_SWAPPING, read_file
from .problems import Problem

__all__ = ['IMAGE_SUFFIXES', 'meta_problems', 'read_meta', 'SplitFiles', 'scan_split',
           'PairCheck', 'check_pair', 'label_problems', 'binary_problems']

#: image extensions looked for by default (matched case-insensitively)
IMAGE_SUFFIXES = ('.jpg', '.jpeg', '.png', '.bmp', '.tif', '.tiff', '.webp')
#: Pillow modes whose pixel values are label indices
INDEX_MODES = {'L', 'P', 'I', 'I;16', 'I;16B', 'I;16L', '1'}


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
class PairCheck(NamedTuple):
    """The result of :func:`check_pair`."""
    problems: List[Problem]
    histogram: Optional[Dict[int, int]]   # label value -> pixels, when a usable label mask
    nbytes: int                           # bytes read and decoded


def _histogram(arr: np.ndarray) -> Dict[int, int]:
    if arr.dtype in (np.uint8, np.bool_):       # bincount: ~20x faster than unique
        # (not a view: Pillow's 1-bit masks hold True as byte 255)
        counts = np.bincount(arr.reshape(-1).astype(np.uint8, copy=False))
        return {v: int(n) for v, n in enumerate(counts.tolist()) if n}
    values, counts = np.unique(arr, return_counts=True)
    return dict(zip(values.tolist(), counts.tolist()))


def check_pair(img_path: str, mask_path: str, read_labels: bool = True,
               decode: bool = True) -> PairCheck:
    """Check an image and its mask: they decode, have one size, the image is upright,
    the mask is a label mask.

    Args:
        img_path (str), mask_path (str): The pair.
        read_labels (bool): Decode the mask and count its labels (its decode is then
            also the full decode check). Default: True.
        decode (bool): Decode both files in full (:func:`read_file`); False reads the
            image's header only. Default: True.
    """
    img = read_file(img_path, 'image', decode)
    mask = read_file(mask_path, 'mask', decode or read_labels)
    nbytes = img.nbytes + mask.nbytes
    if img.problems or mask.problems:
        return PairCheck(img.problems + mask.problems, None, nbytes)
    problems = []
    (ih, iw), (mh, mw) = img.size, mask.size
    if img.orientation in EXIF_ROTATING:
        lh, lw = (iw, ih) if img.orientation in EXIF_SWAPPING else (ih, iw)
        problems.append(Problem(
            'exif-rotation', img_path,
            f'EXIF orientation {img.orientation}: OpenCV (mmseg) rotates this image when '
            f'loading it (to {lh}x{lw}, HxW), but not its mask. Save the pixels upright '
            'without the tag (e.g. PIL ImageOps.exif_transpose) and make sure the mask '
            'matches them'))
    elif img.size != mask.size:
        problems.append(Problem('size-mismatch', mask_path,
                                f'mask is {mh}x{mw} (HxW) but its image {img_path} is '
                                f'{ih}x{iw}: a mask must label every pixel of its image'))
    if not read_labels:
        return PairCheck(problems, None, nbytes)
    if mask.mode in ('RGB', 'RGBA'):
        arr = mask.pixels
        grey = bool((arr[..., 0] == arr[..., 1]).all() and (arr[..., 1] == arr[..., 2]).all())
        how = ('its three channels are equal, a grey index mask saved as RGB: '
               'tools/dataset_converters/convert_masks.py --gray' if grey else
               'map colours to class indices with tools/dataset_converters/convert_masks.py '
               '(palette from meta.json)')
        problems.append(Problem('rgb-mask', mask_path, f'colour ({mask.mode}) mask; masks must '
                                                       f'hold one class index per pixel: {how}'))
        return PairCheck(problems, None, nbytes)
    if mask.mode not in INDEX_MODES:
        problems.append(Problem('mask-mode', mask_path,
                                f'pixel format {mask.mode} is not a label mask; save one class '
                                'index per pixel as an 8-bit grey or palette PNG'))
        return PairCheck(problems, None, nbytes)
    return PairCheck(problems, _histogram(mask.pixels), nbytes)


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
    fix = ('convert them with tools/dataset_converters/convert_masks.py '
           '(meta.json palette [[0,0,0],[255,255,255]]) or save the foreground as 1')
    return [Problem('binary-0-255', path,
                    f'mask holds only 0 and 255 and no mask of the dataset holds a label {fg}: '
                    f'255 is the ignore index ({ignore_index}) or out of range, so the '
                    f'foreground would never be learned; {fix}') for path in with_255]
