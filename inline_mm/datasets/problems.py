"""The finding every data check returns: a :class:`Problem` ``(code, path, message)``;
callers decide what to do with it (``tools/misc/check_dataset.py`` reports all of them,
:class:`SegFolderDataset` refuses what would break training, ``inline_mm.engine``'s
``DatasetCheckHook`` and empty-dataset messages stop a run before it starts).

Problem codes: :data:`PROBLEM_CODES` (``message`` never repeats ``path``). Warnings (same
record): skipped-file (not an image), class-absent. The rules: :mod:`.folder_checks`
(segmentation folders), :mod:`.image_reading` (one file decoded as training will),
:mod:`.dataset_files` (the files of built datasets), :mod:`.coco_checks` (COCO files).
"""
from typing import NamedTuple

__all__ = ['PROBLEM_CODES', 'Problem']

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


class Problem(NamedTuple):
    """One finding: a code (see the module docstring), the file or folder, what is wrong."""
    code: str
    path: str
    message: str

    def __str__(self) -> str:
        return f'{self.path}: {self.message}' if self.path else self.message
