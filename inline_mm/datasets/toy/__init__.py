"""Generators of small real datasets for demos and tests (tools/misc/make_toy_dataset.py).

A generated dataset carries a stamp, ``<root>/toy_dataset.json``: which generator wrote
it (a hash of the generator's source and the versions of the libraries that draw and
encode the images), with which arguments, and a hash of every file it wrote.  A reader
that wants *this* generator's data (the demo) compares the stamp with
:func:`expected_stamp` and the files with :func:`content_hash`, and regenerates on any
difference, so figures measured on the data are never silently measured on data an
older generator made.
"""
import hashlib
import importlib
import json
import os
import os.path as osp
from typing import Iterable, Optional

__all__ = ['STAMP_FILE', 'expected_stamp', 'write_stamp', 'read_stamp', 'content_hash',
           'stamp_mismatch']

STAMP_FILE = 'toy_dataset.json'


def _library_versions() -> dict:
    import cv2
    import numpy
    import PIL
    return {'numpy': numpy.__version__, 'opencv': cv2.__version__, 'pillow': PIL.__version__}


def expected_stamp(module: str, params: dict) -> dict:
    """The stamp that generator ``module`` (e.g. ``'inline_mm.datasets.toy.coco'``) writes
    for ``params`` with the libraries installed now."""
    path = importlib.import_module(module).__file__
    with open(path, 'rb') as f:
        source = hashlib.sha256(f.read()).hexdigest()
    return {'generator': module, 'generator_sha256': source,
            'libraries': _library_versions(), 'params': params}


def content_hash(root: str, files: Iterable[str]) -> str:
    """sha256 over the names and bytes of ``files`` (paths relative to ``root``)."""
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(rel.encode() + b'\0')
        with open(osp.join(root, rel), 'rb') as f:
            h.update(hashlib.sha256(f.read()).digest())
    return h.hexdigest()


def write_stamp(root: str, stamp: dict, files: Iterable[str]):
    """Record ``stamp`` and the hash of ``files`` in ``root``; written last, so an
    interrupted generation leaves no stamp."""
    files = sorted(files)
    data = dict(stamp, files=files, content_sha256=content_hash(root, files))
    tmp = osp.join(root, STAMP_FILE + '.tmp')
    with open(tmp, 'w') as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, osp.join(root, STAMP_FILE))


def read_stamp(root: str) -> Optional[dict]:
    try:
        with open(osp.join(root, STAMP_FILE)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def stamp_mismatch(root: str, expected: dict) -> Optional[str]:
    """Why the data in ``root`` is not what ``expected`` describes, or None if it is."""
    found = read_stamp(root)
    if found is None:
        return f'{root} has no readable {STAMP_FILE} (written by an older or interrupted generator)'
    for key in ('generator', 'generator_sha256', 'libraries', 'params'):
        if found.get(key) != expected[key]:
            return f'{root} was written with another {key}: {found.get(key)} != {expected[key]}'
    try:
        actual = content_hash(root, found['files'])
    except (OSError, KeyError, TypeError) as e:
        return f'{root}: files of the stamp cannot be read ({e})'
    if actual != found.get('content_sha256'):
        return f'{root}: files changed since they were generated'
    return None
