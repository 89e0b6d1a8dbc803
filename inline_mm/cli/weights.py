"""The official InLine ImageNet weights: list, download, verify, locate.

    python -m inline_mm.cli.weights list          # the 13 files: family, variant, link, local copy
    python -m inline_mm.cli.weights fetch swin_t  # download and verify now (--all: every file)
    python -m inline_mm.cli.weights verify        # hash and layout of every local file
    python -m inline_mm.cli.weights path swin_t   # where the file is, or would be cached

(also ``inline-mm-weights``). The resolver itself, where files are looked for and how they
are downloaded and verified: :mod:`inline_mm.models.weights`.
"""
import argparse
import sys
from pathlib import Path
from typing import List, Optional

from inline_mm.models.weights import (MANUAL_DIR, SCHEME, Target, WeightsError, cache_dir, fetch,
                                      format_size, local_copy, offline, releases, target,
                                      verify_local)

PROG = 'python -m inline_mm.cli.weights'


def _reference(name: str) -> str:
    return name if '://' in name else SCHEME + name


def _cmd_list(args) -> int:
    rows = [('NAME', 'FAMILY', 'VARIANT', 'LOCAL', 'SIZE', 'URL')]
    for name, (family, variant) in releases().items():
        t = target(SCHEME + name)
        where, path = local_copy(t)
        rows.append((SCHEME + name, family.name, variant.arch, where,
                     format_size(path.stat().st_size) if path else '-', t.url))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        print('  '.join(c.ljust(w) for c, w in zip(r, widths)) + '  ' + r[-1])
    mode = f'; downloads off ({offline()}=1)' if offline() else ''
    print(f'\ncache: {cache_dir()} (INLINE_MM_WEIGHTS){mode}; sha256 of the official files: '
          'not published, recorded on first download')
    return 0


def _cmd_fetch(args) -> int:
    names = list(releases()) if args.all else args.names
    if not names:
        sys.exit(f'error: name the files to fetch ({PROG} list), or --all')
    failed = 0
    for name in names:
        try:
            print(fetch(target(_reference(name)), force=args.force))
        except (WeightsError, FileNotFoundError) as e:
            print(f'error: {e}', file=sys.stderr)
            failed += 1
    return 1 if failed else 0


def _cmd_verify(args) -> int:
    by_file = {t.file: t for t in (target(SCHEME + name) for name in releases())}
    cached = [(p, by_file.get(p.name) or Target(str(p), p.name), True)
              for p in sorted(cache_dir().glob('*'))
              if p.is_file() and p.suffix != '.sha256' and not p.name.startswith('.')]
    manual = [(Path(MANUAL_DIR) / f, t, False) for f, t in by_file.items()
              if (Path(MANUAL_DIR) / f).is_file()]
    if not cached + manual:
        print(f'nothing to verify: no files in {cache_dir()} or {MANUAL_DIR}/')
        return 0
    failed = 0
    for path, t, in_cache in cached + manual:
        try:
            digest, note = verify_local(path, t, in_cache)
            print(f'ok    {path}  ({t.label}, sha256 {digest[:16]}..., {note})')
        except WeightsError as e:
            print(f'FAIL  {path}: {e}')
            failed += 1
    return 1 if failed else 0


def _cmd_path(args) -> int:
    t = target(_reference(args.name))
    where, path = local_copy(t)
    if path is not None:
        print(path)
        return 0
    print(cache_dir() / t.file)
    print(f'(not on this machine yet: {PROG} fetch {args.name} downloads '
          f'it from {t.url}; or put the file there)', file=sys.stderr)
    return 1


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description='The official InLine ImageNet weights: list, download, verify, locate.')
    sub = parser.add_subparsers(dest='command', required=True)
    sub.add_parser('list', help='every official file: name, family, variant, local copy, URL')
    fetch_p = sub.add_parser('fetch', help='download (once) and verify files into the cache')
    fetch_p.add_argument('names', nargs='*', metavar='NAME',
                         help="short name ('swin_t' or 'inline://swin_t') or URL")
    fetch_p.add_argument('--all', action='store_true', help='all 13 official files')
    fetch_p.add_argument('--force', action='store_true',
                         help='download again even if the cache has the file')
    sub.add_parser('verify', help='check the hash and layout of every cached file')
    path_p = sub.add_parser('path', help='print where a file is (or would be cached)')
    path_p.add_argument('name', metavar='NAME')
    args = parser.parse_args(argv)
    try:
        return dict(list=_cmd_list, fetch=_cmd_fetch, verify=_cmd_verify,
                    path=_cmd_path)[args.command](args)
    except WeightsError as e:
        print(f'error: {e}', file=sys.stderr)
        return 1


if __name__ == '__main__':
    sys.exit(main())
