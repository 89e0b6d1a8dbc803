"""Turn colour (palette RGB) masks into class-index masks that mmseg can train on.

    inline-mm-convert-masks masks_rgb/ masks/ --meta data/my_dataset/meta.json
    inline-mm-convert-masks masks_rgb/ masks/ --palette "0,0,0;128,64,128;70,70,70"
    inline-mm-convert-masks masks_grey_rgb/ masks/ --gray      # R == G == B == index

Every pixel whose colour is palette entry ``i`` becomes class ``i``. The outputs are
palette-mode PNGs (``<stem>.png``, sub-folders kept): image viewers show the class
colours, and mmseg reads the indices. Grey masks are matched as colours ``(v, v, v)``,
so 0/255 "object on black" masks become 0/1 with the palette ``[[0,0,0],[255,255,255]]``.

Colours that are not in the palette are an error, listed per file, unless ``--nearest
D`` maps colours within distance D of an entry (JPEG or anti-aliasing noise) or
``--unknown ignore`` labels them ``--ignore-index``. A run with any error writes
nothing: the output appears only when every mask converted.
``--ignore-color r,g,b`` (repeatable) marks colours that mean "unlabelled" (e.g.
a white border) as ``--ignore-index``. Only numpy and Pillow are needed.
"""
import argparse
import json
import os
import os.path as osp
import shutil
import sys
import tempfile
from typing import List, Optional, Sequence, Tuple

import numpy as np
from PIL import Image

from inline_mm.cli import doc_parser

MASK_SUFFIXES = ('.png', '.bmp', '.tif', '.tiff', '.gif', '.jpg', '.jpeg', '.webp')


def parse_colour(text: str) -> Tuple[int, int, int]:
    try:
        rgb = tuple(int(v) for v in text.split(','))
    except ValueError:
        rgb = ()
    if len(rgb) != 3 or not all(0 <= v <= 255 for v in rgb):
        raise argparse.ArgumentTypeError(f'expected a colour "r,g,b" with 0..255, got {text!r}')
    return rgb


def load_palette(args) -> Optional[List[Tuple[int, int, int]]]:
    if args.palette:
        return [parse_colour(c) for c in args.palette.split(';') if c.strip()]
    if args.meta:
        with open(args.meta) as f:
            meta = json.load(f)
        palette = meta.get('palette')
        if not palette:
            raise SystemExit(f'error: {args.meta} has no "palette"; add one colour per class '
                             '(the colours used in your masks) or pass --palette')
        if len(palette) != len(meta.get('classes', palette)):
            raise SystemExit(f'error: {args.meta}: {len(palette)} palette colours for '
                             f'{len(meta["classes"])} classes')
        return [tuple(int(v) for v in p) for p in palette]
    return None


def _keys(rgb: np.ndarray) -> np.ndarray:
    rgb = rgb.astype(np.int64)
    return (rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2]


def colour_to_index(rgb: np.ndarray, palette: Sequence[Tuple[int, int, int]],
                    ignore_colours: Sequence[Tuple[int, int, int]] = (),
                    ignore_index: int = 255, nearest: float = 0.) -> Tuple[np.ndarray, dict]:
    """``(H, W, 3)`` colours -> ``(H, W)`` indices; also ``{unknown colour: pixels}``.

    Unknown colours become ``ignore_index`` (the caller decides whether that is an
    error, from the returned dict).
    """
    if len(set(palette)) != len(palette):
        raise ValueError('the palette repeats a colour, so its classes cannot be told apart')
    colours, inverse = np.unique(_keys(rgb).reshape(-1), return_inverse=True)
    lut = np.full(len(colours), ignore_index, np.int64)
    pal = np.array(palette, np.int64)
    pal_keys = _keys(pal)
    unknown_px = {}
    counts = np.bincount(inverse, minlength=len(colours))
    ignore_keys = set(_keys(np.array(ignore_colours, np.int64)).tolist()) \
        if ignore_colours else set()
    for j, key in enumerate(colours.tolist()):
        hit = np.nonzero(pal_keys == key)[0]
        if hit.size:
            lut[j] = hit[0]
            continue
        if key in ignore_keys:
            continue
        c = np.array([(key >> 16) & 255, (key >> 8) & 255, key & 255])
        if nearest > 0:
            d = np.sqrt(((pal - c) ** 2).sum(1))
            if d.min() <= nearest:
                lut[j] = int(d.argmin())
                continue
        unknown_px[tuple(c.tolist())] = int(counts[j])
    return lut[inverse].reshape(rgb.shape[:2]), unknown_px


def save_palette_png(path: str, index: np.ndarray, palette: Optional[Sequence]):
    im = Image.fromarray(index.astype(np.uint8))
    if palette:
        im = im.convert('P')
        flat = [int(v) for rgb in palette for v in rgb]
        im.putpalette(flat + [0] * (768 - len(flat)))
    im.save(path)


def convert_file(src: str, dst: str, args, palette) -> Optional[str]:
    """Convert one mask; returns an error message or None."""
    try:
        with Image.open(src) as im:
            im.load()
    except Exception as e:
        return f'cannot open ({e})'
    if args.gray:
        arr = np.asarray(im.convert('RGB') if im.mode not in ('L', 'I', 'I;16') else im)
        if arr.ndim == 3:
            if not ((arr[..., 0] == arr[..., 1]).all() and (arr[..., 1] == arr[..., 2]).all()):
                return 'channels differ: a colour mask, not grey; convert it with a palette'
            arr = arr[..., 0]
        if arr.max(initial=0) > 255:
            return f'values up to {arr.max()} do not fit an 8-bit mask'
        save_palette_png(dst, arr, palette)
        return None
    rgb = np.asarray(im.convert('RGB'))
    index, unknown = colour_to_index(rgb, palette, args.ignore_color, args.ignore_index,
                                     args.nearest)
    if unknown and args.unknown == 'error':
        top = sorted(unknown.items(), key=lambda kv: -kv[1])
        shown = ', '.join(f'({r},{g},{b}) {n} px' for (r, g, b), n in top[:5])
        more = f' and {len(top) - 5} more' if len(top) > 5 else ''
        return (f'{len(top)} colour(s) not in the palette: {shown}{more}. Add them to the '
                'palette, or use --nearest D (noise), --ignore-color r,g,b (unlabelled) or '
                '--unknown ignore')
    save_palette_png(dst, index, palette)
    return None


def parse_args(argv=None):
    p = doc_parser(__doc__)
    p.add_argument('src', help='folder of colour masks (searched recursively)')
    p.add_argument('dst', help='output folder for index masks (created)')
    src = p.add_mutually_exclusive_group()
    src.add_argument('--meta', help='meta.json whose "palette" lists the class colours')
    src.add_argument('--palette', help='class colours "r,g,b;r,g,b;..." (class 0 first)')
    p.add_argument('--gray', action='store_true',
                   help='masks are grey indices stored as RGB: take one channel (a palette, '
                        'if given, only colours the output PNGs)')
    p.add_argument('--nearest', type=float, default=0.,
                   help='map colours within this RGB distance of a palette colour (0: exact)')
    p.add_argument('--ignore-color', type=parse_colour, action='append', default=[],
                   help='colour "r,g,b" meaning unlabelled -> --ignore-index (repeatable)')
    p.add_argument('--ignore-index', type=int, default=255,
                   help='label written for ignored pixels (255)')
    p.add_argument('--unknown', choices=('error', 'ignore'), default='error',
                   help='colours not in the palette: fail the file (error) or label them '
                        '--ignore-index (ignore)')
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if not osp.isdir(args.src):
        print(f'error: {args.src} is not a folder')
        return 1
    if osp.abspath(args.src) == osp.abspath(args.dst):
        print('error: write to another folder than the source (the source stays as it is)')
        return 1
    palette = load_palette(args)
    if not args.gray:
        if palette is None:
            print('error: give the class colours with --meta or --palette (or --gray for '
                  'grey index masks saved as RGB)')
            return 1
        if len(palette) > 255 or len(palette) < 2:
            print(f'error: the palette must have 2..255 colours, got {len(palette)}')
            return 1
    files = []
    for dirpath, dirnames, names in os.walk(args.src):
        dirnames.sort()
        files += [osp.join(dirpath, n) for n in sorted(names)
                  if osp.splitext(n)[1].lower() in MASK_SUFFIXES and not n.startswith('.')]
    if not files:
        print(f'error: no mask images ({", ".join(MASK_SUFFIXES)}) in {args.src}')
        return 1
    # Everything is written into a scratch folder beside the output and moved there only
    # when every mask converted: a failed run leaves no partial output (and removes only
    # its scratch folder, nothing that was there before).
    parent = osp.dirname(osp.abspath(args.dst))
    os.makedirs(parent, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix=f'.{osp.basename(osp.abspath(args.dst))}.', dir=parent)
    failed = 0
    try:
        for src in files:
            rel = osp.splitext(osp.relpath(src, args.src))[0] + '.png'
            dst = osp.join(scratch, rel)
            os.makedirs(osp.dirname(dst), exist_ok=True)
            error = convert_file(src, dst, args, palette)
            if error:
                failed += 1
                print(f'ERROR {osp.relpath(src, args.src)}: {error}')
        if not failed:
            publish(scratch, args.dst)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if failed:
        print(f'{failed} of {len(files)} mask(s) failed: nothing written (fix them and run '
              'again)')
        return 1
    print(f'converted {len(files)} mask(s) into {args.dst}')
    return 0


def publish(scratch: str, dst: str):
    """Move the converted masks from ``scratch`` to ``dst``: a rename when ``dst`` does
    not exist, else file by file (files of the same name are replaced, others kept)."""
    if not osp.exists(dst):
        os.rename(scratch, dst)
        return
    for dirpath, _, names in os.walk(scratch):
        target = osp.join(dst, osp.relpath(dirpath, scratch))
        os.makedirs(target, exist_ok=True)
        for name in names:
            os.replace(osp.join(dirpath, name), osp.join(target, name))


if __name__ == '__main__':
    sys.exit(main())
