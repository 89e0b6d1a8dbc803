#!/usr/bin/env python
"""Compare every config's resolved contents with those of another git revision.

    python tools/dev/compare_configs.py main        # or a commit, a tag

Loads each ``configs/**/*.py`` (``_base_`` folders excluded) with mmengine's
``Config.fromfile`` in this checkout and in ``REV`` (exported with ``git archive``),
and prints every key whose value differs, or that exists on one side only. Use it when
restructuring configs: the resolved configs must stay what they were, except where a
change is intended. Exit status 1 when anything differs.

``custom_imports`` is left out by default (``--ignore`` names other top-level keys):
it says which modules register the types, not what is built, and moves with the package.
"""
import argparse
import glob
import os
import os.path as osp
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def resolved(root: str) -> dict:
    from mmengine.config import Config
    out = {}
    for path in sorted(glob.glob(osp.join(root, 'configs', '**', '*.py'), recursive=True)):
        rel = osp.relpath(path, root)
        if '_base_' not in rel.split(os.sep):
            out[rel] = Config.fromfile(path, import_custom_modules=False).to_dict()
    return out


def differences(a, b, where='', ignore=()):
    """What differs between ``a`` (this checkout) and ``b`` (the revision), key by key;
    ``ignore`` names keys of the top level left out."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if key in ignore:
                continue
            if key not in a:
                yield f'{where}.{key}: only in the revision'
            elif key not in b:
                yield f'{where}.{key}: only in this checkout'
            else:
                yield from differences(a[key], b[key], f'{where}.{key}')
    elif a != b:
        yield f'{where}: {b!r} -> {a!r}'


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('rev', help='git revision to compare with (e.g. main)')
    p.add_argument('--ignore', action='append', metavar='KEY',
                   help='top-level key to leave out (repeatable; default: custom_imports)')
    args = p.parse_args(argv)
    ignore = set(args.ignore or ['custom_imports'])
    archive = subprocess.run(['git', 'archive', args.rev, 'configs'], cwd=ROOT, check=True,
                             capture_output=True).stdout
    with tempfile.TemporaryDirectory() as tmp:
        tarfile.open(fileobj=BytesIO(archive)).extractall(tmp)
        before = resolved(tmp)
    after = resolved(ROOT)
    found = 0
    for name in sorted(set(before) | set(after)):
        if name not in before or name not in after:
            print(f'{name}: only in {"this checkout" if name in after else args.rev}')
            found += 1
            continue
        for line in differences(after[name], before[name], ignore=ignore):
            print(f'{name}{line}')
            found += 1
    print(f'{len(after)} configs compared with {args.rev}: {found} difference(s)')
    return 1 if found else 0


if __name__ == '__main__':
    sys.exit(main())
