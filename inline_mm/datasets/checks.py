"""The data checks, in one place: every rule returns :class:`Problem` ``(code, path,
message)`` records; callers decide what to do with them.

Used by ``tools/misc/check_dataset.py`` (reports all of them), :class:`SegFolderDataset`
(refuses what would break training), and ``inline_mm.engine``'s
``DatasetCheckHook`` / empty-dataset messages. Only numpy and Pillow are needed;
with OpenCV installed images are also decoded as mmcv's ``LoadImageFromFile`` does.

Problem codes: :data:`PROBLEM_CODES` (``message`` never repeats ``path``). Warnings (same
record): skipped-file (not an image), class-absent.

A full decode (:func:`read_file`, :func:`check_pair` and :func:`check_dataset_files`
with ``decode=True``) refuses what the training pipelines would fail on when a data
worker reaches the file, possibly hours in: mmcv's ``LoadImageFromFile`` decodes
images with ``cv2.imdecode``, which returns nothing for a broken file (or, in some
OpenCV versions, a partial image with only a libjpeg warning), and mmseg's
``LoadAnnotations`` decodes masks with Pillow. A file is refused when Pillow cannot
decode it strictly (truncated files refused, whatever ``LOAD_TRUNCATED_IMAGES``
another library set) or, for images, when OpenCV returns nothing or another size.
"""
import contextlib
import functools
import io
import json
import os
import os.path as osp
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
from PIL import Image, ImageFile

__all__ = ['PROBLEM_CODES', 'Problem', 'IMAGE_SUFFIXES', 'meta_problems', 'read_meta', 'SplitFiles',
           'scan_split', 'image_size', 'FileRead', 'read_file', 'decode_problems',
           'PairCheck', 'check_pair', 'label_problems', 'binary_problems', 'check_coco',
           'default_jobs', 'parallel_map', 'FileTally', 'FileCheck', 'check_sample',
           'check_dataset_files', 'dataset_file_problems', 'base_datasets']

#: Every problem code and what it means (``inline-mm-check-dataset --help`` prints this).
PROBLEM_CODES = """\
  missing-dir, empty-split        a split folder is missing or has no images
  unpaired-image, unpaired-mask   an image without its mask, a mask without its image
  duplicate-name                  two images with one stem (a.jpg and a.png) share a mask
  mask-format                     a mask that is not .png (JPEG changes label values)
  size-mismatch                   image and mask sizes differ
  exif-rotation                   a JPEG with an EXIF rotation: OpenCV (mmseg) rotates
                                  the image when loading, the mask is not rotated
  rgb-mask                        a colour (RGB) mask: convert with inline-mm-convert-masks
  mask-mode                       another pixel format mmseg cannot use as labels
  label-out-of-range              label values >= num_classes other than ignore_index
  binary-0-255                    a 2-class set stored as 0/255: 255 is the ignore index,
                                  so the foreground would never be learned
  unreadable                      a file whose header cannot be read: empty (0 bytes),
                                  another format (e.g. text named .jpg), garbage, no access
  truncated                       a file that ends before its pixels do (interrupted
                                  download or copy); found by the full decode only (for
                                  images, not by --quick)
  corrupt                         pixels that do not decode, or that OpenCV (the image
                                  loader of the pipelines) cannot decode in full; found
                                  by the full decode only (for images, not by --quick)
  missing-file                    a file a dataset lists but that is not on disk
  meta                            meta.json missing, malformed or inconsistent
  coco                            a COCO annotation file that would break training"""

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


# ------------------------------------------------------------------ reading files
def image_size(path: str) -> Tuple[int, int]:
    """(height, width) from the file header (no decoding)."""
    with Image.open(path) as im:
        return im.height, im.width


def _exif_orientation(im: Image.Image) -> int:
    try:
        return int(im.getexif().get(0x0112, 1) or 1)
    except Exception:           # a corrupt EXIF block is not ours to diagnose
        return 1


@functools.lru_cache(maxsize=None)
def _cv2():
    """OpenCV, the decoder of mmcv's ``LoadImageFromFile``; None where it is not installed."""
    try:
        import cv2
    except ImportError:
        return None
    return cv2


@contextlib.contextmanager
def _strict_decoders():
    """Pillow refuses truncated files and OpenCV keeps its log quiet for the duration,
    whatever another library set; both settings are put back afterwards."""
    truncated = ImageFile.LOAD_TRUNCATED_IMAGES
    ImageFile.LOAD_TRUNCATED_IMAGES = False
    cv2 = _cv2()
    log = getattr(getattr(cv2, 'utils', None), 'logging', None)
    level = log.getLogLevel() if log is not None else None
    if log is not None:
        log.setLogLevel(log.LOG_LEVEL_SILENT)     # we report what it cannot decode
    try:
        yield
    finally:
        ImageFile.LOAD_TRUNCATED_IMAGES = truncated
        if log is not None:
            log.setLogLevel(level)


def _cv2_decode(data: bytes) -> Optional[np.ndarray]:
    """The image as ``mmcv.imfrombytes(data, backend='cv2')`` (the default of
    ``LoadImageFromFile``) decodes it, or None."""
    cv2 = _cv2()
    try:
        return cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    except cv2.error:
        return None


class FileRead(NamedTuple):
    """What :func:`read_file` learnt about one file."""
    problems: List[Problem]
    size: Optional[Tuple[int, int]]     # (height, width) from the header
    mode: Optional[str]                 # Pillow pixel format
    orientation: int                    # EXIF orientation (images; 1 for masks)
    pixels: Optional[np.ndarray]        # the decoded mask (masks only)
    nbytes: int                         # bytes read and decoded (0: header only)


def read_file(path: str, kind: str = 'image', decode: bool = True) -> FileRead:
    """Open an image or mask as training will, and say why it would fail.

    With ``decode``, the file is read once and decoded in full by Pillow with
    truncated files refused (``LOAD_TRUNCATED_IMAGES`` off during the call, whatever
    another library set). An image must then also decode with OpenCV, as mmcv's
    ``LoadImageFromFile`` does it (when OpenCV is installed), to an array of its
    header's size; a mask is decoded by Pillow only, as mmseg's ``LoadAnnotations``
    does it. Without ``decode`` only the header is read.

    Args:
        path (str): The file.
        kind (str): ``'image'`` or ``'mask'``. Default: ``'image'``.
        decode (bool): Decode the pixels. Default: True.

    Returns:
        FileRead: ``problems`` holds at most one of ``unreadable``, ``truncated``,
        ``corrupt``; the other fields are None (0) when it is not empty.
    """
    if kind not in ('image', 'mask'):
        raise ValueError(f"kind must be 'image' or 'mask', got {kind!r}")

    def refused(code: str, message: str) -> FileRead:
        return FileRead([Problem(code, path, message)], None, None, 1, None, 0)

    try:
        if decode:
            with open(path, 'rb') as f:
                data = f.read()
        empty = not data if decode else osp.getsize(path) == 0
    except OSError as e:
        return refused('unreadable', f'cannot read the {kind} ({e.strerror or e})')
    if empty:
        return refused('unreadable', f'empty {kind} file (0 bytes)')
    with _strict_decoders():
        try:
            im = Image.open(io.BytesIO(data) if decode else path)
        except Image.UnidentifiedImageError:
            return refused('unreadable', 'not an image file that Pillow recognises (another '
                                         'format, e.g. text or HTML, or garbage)')
        except Exception as e:      # a header that ends or breaks early
            return refused('unreadable', f'cannot open the {kind} ({_reason(e)})')
        with im:
            size, mode = (im.height, im.width), im.mode
            orientation = _exif_orientation(im) if kind == 'image' else 1
            if not decode:
                return FileRead([], size, mode, orientation, None, 0)
            try:
                im.load()
                pixels = np.array(im) if kind == 'mask' else None     # as mmseg
            except Exception as e:
                return _decode_failure(path, e)
        if kind == 'image' and _cv2() is not None:
            decoded = _cv2_decode(data)
            # OpenCV applies EXIF rotations, so height and width may be swapped.
            if decoded is None:
                return refused('corrupt', 'OpenCV, which LoadImageFromFile decodes images '
                                          'with, cannot decode it (Pillow can): export it '
                                          'again, e.g. as a plain JPEG or PNG')
            if decoded.shape[:2] not in (size, size[::-1]):
                h, w = decoded.shape[:2]
                return refused('corrupt', f'OpenCV decodes only {h}x{w} (HxW) of its '
                                          f'{size[0]}x{size[1]} pixels')
    return FileRead([], size, mode, orientation, pixels, len(data))


def decode_problems(path: str, kind: str = 'image') -> List[Problem]:
    """What stops the training pipeline from decoding ``path`` in full (see
    :func:`read_file`): empty when it decodes."""
    return read_file(path, kind, decode=True).problems


def _reason(e: Exception) -> str:
    return str(e) or type(e).__name__


def _decode_failure(path: str, e: Exception) -> FileRead:
    # Pillow says "image file is truncated", "Truncated File Read", "truncated PNG file".
    if isinstance(e, EOFError) or 'truncated' in str(e).lower():
        problem = Problem('truncated', path, f'the file ends before its pixels do '
                                             f'({_reason(e)}): an interrupted download or '
                                             'copy? Copy it again')
    else:
        problem = Problem('corrupt', path, f'the pixels do not decode ({_reason(e)}); '
                                           'replace the file or remove the sample')
    return FileRead([problem], None, None, 1, None, 0)


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


# ------------------------------------------------------------------ many files at once
def default_jobs() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:              # not on Linux
        return os.cpu_count() or 1


def parallel_map(func: Callable, items: Sequence, jobs: Optional[int] = None,
                 progress: Optional[Callable[[int, int], None]] = None) -> list:
    """``[func(item) for item in items]`` on ``jobs`` threads, results in order.

    Threads, not processes: Pillow and OpenCV release the GIL while they read and
    decode, so decoding scales with the threads (1.9x on 2 cores, measured), and
    nothing is forked (a forked worker of a process whose threads hold locks, e.g.
    OpenCV's pool, can wait forever) or spawned (a fresh interpreter per worker costs
    seconds of imports and needs ``if __name__ == '__main__'`` in the calling script).
    Pillow's ``LOAD_TRUNCATED_IMAGES`` and OpenCV's log level are set once for the run
    (:func:`read_file`'s own per-call setting would race between threads).

    Args:
        func: The function, called once per item.
        items (Sequence): Its arguments.
        jobs (int, optional): Threads; 1 runs on the calling thread. Default: None
            (:func:`default_jobs`).
        progress (callable, optional): Called as ``progress(done, total)`` as results
            come in.
    """
    jobs = default_jobs() if jobs is None else jobs
    if jobs < 1:
        raise ValueError(f'jobs must be >= 1, got {jobs}')
    total, results = len(items), []
    with _strict_decoders(), ThreadPoolExecutor(max(1, min(jobs, total))) as pool:
        calls = map(func, items) if jobs == 1 else pool.map(func, items)
        try:
            for result in calls:
                results.append(result)
                if progress is not None:
                    progress(len(results), total)
        finally:
            pool.shutdown(cancel_futures=True)
    return results


@dataclass
class FileTally:
    """How many images and masks a check looked at, and how many bytes it decoded."""
    images: int = 0
    masks: int = 0
    nbytes: int = 0

    def __iadd__(self, other: 'FileTally') -> 'FileTally':
        self.images += other.images
        self.masks += other.masks
        self.nbytes += other.nbytes
        return self

    def describe(self, seconds: float, headers_only: bool = False) -> str:
        """E.g. ``2,020 images and 2,020 masks (412 MB) in 8.3 s``; with
        ``headers_only``, ``2,020 image headers and ...``."""
        noun = 'image header' if headers_only else 'image'
        files = f'{self.images:,} {noun}{"s" * (self.images != 1)}'
        if self.masks:
            files += f' and {self.masks:,} mask{"s" * (self.masks != 1)}'
        read = f' ({_megabytes(self.nbytes)})' if self.nbytes else ''
        return f'{files}{read} in {seconds:.1f} s'


def _megabytes(n: int) -> str:
    if n < 1e6:
        return f'{n / 1e3:.0f} kB'
    if n >= 1e9:
        return f'{n / 1e9:.1f} GB'
    return f'{n / 1e6:.1f} MB' if n < 1e8 else f'{n / 1e6:,.0f} MB'


# ------------------------------------------------------------------ built datasets
class FileCheck(NamedTuple):
    """The result of :func:`check_sample` and :func:`check_dataset_files`."""
    problems: List[Problem]
    tally: FileTally


def check_sample(img: Optional[str], seg: Optional[str] = None, check_sizes: bool = True,
                 decode: bool = True) -> FileCheck:
    """The files of one dataset sample (``img_path``, ``seg_map_path``): on disk,
    decodable (with ``decode``, :func:`read_file`) and, with ``check_sizes``, of one
    size (from the headers). Without ``decode`` or ``check_sizes`` only their
    existence is checked."""
    problems, tally = [], FileTally()
    img_ok = img is None or osp.isfile(img)
    if not img_ok:
        problems.append(Problem('missing-file', img, 'image file not found'))
    seg_ok = seg is not None and osp.isfile(seg)
    if seg is not None and not seg_ok:
        problems.append(Problem('missing-file', seg, f'mask file not found (for {img})'))
    sizes = check_sizes and seg_ok and img_ok and img is not None
    reads = {}
    for path, kind, ok in ((img, 'image', img_ok), (seg, 'mask', seg_ok)):
        if path is not None and ok and (decode or sizes):
            reads[kind] = read_file(path, kind, decode)
            problems += reads[kind].problems
    tally.images, tally.masks = int(img is not None), int(seg is not None)
    tally.nbytes = sum(r.nbytes for r in reads.values())
    if sizes and not problems:
        img_hw, seg_hw = reads['image'].size, reads['mask'].size
        if img_hw != seg_hw:
            problems.append(Problem('size-mismatch', seg,
                                    f'mask is {seg_hw[0]}x{seg_hw[1]} (HxW) but its image '
                                    f'{img} is {img_hw[0]}x{img_hw[1]}: a mask must label '
                                    'every pixel of its image'))
    return FileCheck(problems, tally)


def _sample_task(args) -> FileCheck:
    return check_sample(*args)


def check_dataset_files(datasets: Sequence, check_sizes: bool = True, decode: bool = True,
                        jobs: Optional[int] = 1, shard: Tuple[int, int] = (0, 1),
                        progress: Optional[Callable[[int, int], None]] = None) -> FileCheck:
    """Check the files that built mmengine datasets refer to (:func:`check_sample`).

    A file listed by several samples or datasets is checked once. ``shard=(rank,
    world_size)`` checks every ``world_size``-th sample from ``rank`` on, so that the
    processes of a distributed run share the work.

    Args:
        datasets (Sequence): Datasets with ``get_data_info`` (mmdet/mmseg datasets).
        check_sizes (bool): Compare segmentation mask and image sizes. Default: True.
        decode (bool): Decode every image and mask in full. Default: True.
        jobs (int, optional): Decoding threads (:func:`parallel_map`). Default: 1.
        shard (tuple[int, int]): ``(rank, world_size)``. Default: ``(0, 1)``.
        progress (callable, optional): ``progress(done, total)``.

    Returns:
        FileCheck: problems sorted by path, and what was read.
    """
    rank, world_size = shard
    if not 0 <= rank < world_size:
        raise ValueError(f'shard must be (rank, world_size) with 0 <= rank < world_size, '
                         f'got {shard}')
    samples = {}
    for dataset in datasets:
        for i in range(len(dataset)):
            info = dataset.get_data_info(i)
            samples[(info.get('img_path'), info.get('seg_map_path'))] = None
    tasks = [(img, seg, check_sizes, decode) for img, seg in list(samples)[rank::world_size]]
    problems, tally = [], FileTally()
    for found in parallel_map(_sample_task, tasks, jobs, progress):
        problems += found.problems
        tally += found.tally
    return FileCheck(sorted(problems, key=lambda p: (p.path, p.code)), tally)


def dataset_file_problems(dataset, check_sizes: bool = True, decode: bool = False
                          ) -> List[Problem]:
    """Problems with the files a built mmengine dataset refers to: every ``img_path``
    (and ``seg_map_path``, when present) exists, decodes in full with ``decode``, and,
    with ``check_sizes``, a segmentation mask has its image's size (read from the file
    headers). EXIF rotations are not applied here; ``tools/misc/check_dataset.py`` reports
    those. See :func:`check_dataset_files` for a parallel check with counts."""
    return check_dataset_files([dataset], check_sizes, decode).problems


def base_datasets(dataset) -> list:
    """The datasets holding files, inside ConcatDataset / RepeatDataset wrappers."""
    if dataset is None:
        return []
    if hasattr(dataset, 'datasets'):
        return [d for inner in dataset.datasets for d in base_datasets(inner)]
    inner = getattr(dataset, 'dataset', None)
    if inner is not None and hasattr(inner, 'get_data_info'):
        return base_datasets(inner)
    return [dataset] if hasattr(dataset, 'get_data_info') else []
