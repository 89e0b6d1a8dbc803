"""Reading one image or mask as the training pipelines will, and why it would fail:
:func:`read_file` (its header, or a full decode), :func:`decode_problems`, :func:`image_size`,
and the EXIF orientations that OpenCV applies. Only numpy and Pillow are needed; with OpenCV
installed images are also decoded as mmcv's ``LoadImageFromFile`` does.

A full decode (:func:`read_file`, and :func:`.check_pair` and :func:`.check_dataset_files`
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
import os.path as osp
from typing import List, NamedTuple, Optional, Tuple

import numpy as np
from PIL import Image, ImageFile

from .problems import Problem

__all__ = ['EXIF_ROTATING', 'EXIF_SWAPPING', 'image_size', 'strict_decoders', 'FileRead',
           'read_file', 'decode_problems']

#: EXIF orientations that OpenCV applies when decoding; 5-8 also swap width and height
EXIF_ROTATING = {2, 3, 4, 5, 6, 7, 8}
EXIF_SWAPPING = {5, 6, 7, 8}


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
def strict_decoders():
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
    with strict_decoders():
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

