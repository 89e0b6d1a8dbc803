#!/usr/bin/env python
"""Check a segmentation dataset before training; report every problem, with file names.

    python tools/check_dataset.py data/my_dataset                 # images/, masks/, meta.json
    python tools/check_dataset.py --config configs/custom/my.py   # exactly what the config reads
    python tools/check_dataset.py --config CONFIG --cfg-options train_dataloader.dataset.data_root=X

Layout checked (names pair up by file stem; see README "Fine-tune on your own data")::

    ROOT/meta.json                    {"classes": [...], "palette": [[r, g, b], ...]}
    ROOT/images/{train,val}/NAME.jpg  (.jpeg .png .bmp .tif .tiff .webp)
    ROOT/masks/{train,val}/NAME.png   one class index per pixel

Problems (exit status 1; each line names the file):
  missing-dir, empty-split        a split folder is missing or has no images
  unpaired-image, unpaired-mask   an image without its mask, a mask without its image
  duplicate-name                  two images with one stem (a.jpg and a.png) share a mask
  mask-format                     a mask that is not .png (JPEG changes label values)
  size-mismatch                   image and mask sizes differ
  exif-rotation                   a JPEG with an EXIF rotation: OpenCV (mmseg) rotates
                                  the image when loading, the mask is not rotated
  rgb-mask                        a colour (RGB) mask: convert with tools/convert_masks.py
  mask-mode                       another pixel format mmseg cannot use as labels
  label-out-of-range              label values >= num_classes other than ignore_index
  binary-0-255                    a 2-class set stored as 0/255: 255 is the ignore index,
                                  so the foreground would never be learned
  unreadable                      a file that cannot be opened
  meta                            meta.json missing, malformed or inconsistent
Warnings (exit status 0): files in image folders that are not images, classes that
never occur in a split.

Only numpy and Pillow are needed (``--config`` also needs mmengine and mmseg).
"""
import argparse
import json
import os
import os.path as osp
import sys
from collections import Counter
from typing import Dict, List, Optional, Sequence

import numpy as np
from PIL import Image

IMAGE_SUFFIXES = ('.jpg', '.jpeg', '.png', '.bmp', '.tif', '.tiff', '.webp')
#: EXIF orientations that OpenCV applies when decoding; 5-8 also swap width and height
EXIF_ROTATING = {2, 3, 4, 5, 6, 7, 8}
EXIF_SWAPPING = {5, 6, 7, 8}
#: Pillow modes whose pixel values are label indices
INDEX_MODES = {'L', 'P', 'I', 'I;16', 'I;16B', 'I;16L', '1'}


class Report:
    """Collects problems and warnings; prints them as found."""

    def __init__(self, root: str, quiet: bool = False):
        self.root, self.quiet = root, quiet
        self.problems: List[tuple] = []
        self.warnings: List[tuple] = []

    def _rel(self, path: str) -> str:
        if not path:
            return ''
        rel = osp.relpath(path, self.root) if self.root else path
        return path if rel.startswith('..') else rel

    def problem(self, code: str, path: str, message: str):
        self.problems.append((code, self._rel(path), message))
        if not self.quiet:
            print(f'ERROR   [{code}] {self._rel(path)}: {message}')

    def warning(self, code: str, path: str, message: str):
        self.warnings.append((code, self._rel(path), message))
        if not self.quiet:
            where = f' {self._rel(path)}:' if path else ''
            print(f'WARNING [{code}]{where} {message}')


class Split:
    """One split: where its images and masks are."""

    def __init__(self, name: str, img_dir: str, mask_dir: str,
                 img_suffixes: Sequence[str] = IMAGE_SUFFIXES, mask_suffix: str = '.png'):
        self.name, self.img_dir, self.mask_dir = name, img_dir, mask_dir
        self.img_suffixes = tuple(s.lower() for s in img_suffixes)
        self.mask_suffix = mask_suffix


def _walk(folder: str) -> List[str]:
    """Relative paths of all files under ``folder``, sorted, hidden files skipped."""
    out = []
    for dirpath, dirnames, files in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith('.'))
        out += [osp.relpath(osp.join(dirpath, f), folder) for f in files
                if not f.startswith('.')]
    return sorted(out)


def read_meta(path: str, report: Report) -> Optional[dict]:
    """meta.json as a dict, or None (with a ``meta`` problem) when it is unusable."""
    if not osp.isfile(path):
        return None
    try:
        with open(path) as f:
            meta = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        report.problem('meta', path, f'cannot read it as JSON ({e})')
        return None
    classes = meta.get('classes') if isinstance(meta, dict) else None
    if (not isinstance(classes, list) or len(classes) < 2
            or not all(isinstance(c, str) and c for c in classes)):
        report.problem('meta', path, '"classes" must be a list of at least two names, '
                                     'e.g. {"classes": ["background", "road"]}')
        return None
    if len(set(classes)) != len(classes):
        dup = [c for c, n in Counter(classes).items() if n > 1]
        report.problem('meta', path, f'class names repeat: {dup}')
    palette = meta.get('palette')
    if palette is not None:
        if not (isinstance(palette, list) and all(
                isinstance(p, list) and len(p) == 3
                and all(isinstance(v, int) and 0 <= v <= 255 for v in p) for p in palette)):
            report.problem('meta', path, '"palette" must be a list of [r, g, b] (0..255)')
        elif len(palette) != len(classes):
            report.problem('meta', path, f'"palette" has {len(palette)} colours for '
                                         f'{len(classes)} classes; give one per class')
    return meta


def _exif_orientation(im: Image.Image) -> int:
    try:
        return int(im.getexif().get(0x0112, 1) or 1)
    except Exception:           # a corrupt EXIF block is not our problem to diagnose
        return 1


def check_split(split: Split, report: Report, num_classes: int, ignore_index: int,
                reduce_zero_label: bool, stats: dict):
    """Check one split; per-mask label histograms go to ``stats[split.name]``."""
    for folder in (split.img_dir, split.mask_dir):
        if not osp.isdir(folder):
            report.problem('missing-dir', folder, f'{split.name} split folder does not exist')
    if not (osp.isdir(split.img_dir) and osp.isdir(split.mask_dir)):
        return
    images: Dict[str, str] = {}
    for rel in _walk(split.img_dir):
        stem, ext = osp.splitext(rel)
        path = osp.join(split.img_dir, rel)
        if ext.lower() not in split.img_suffixes:
            report.warning('skipped-file', path, f'not an image ({", ".join(split.img_suffixes)}); '
                                                 'training ignores it')
            continue
        if stem in images:
            report.problem('duplicate-name', path,
                           f'{osp.basename(images[stem])} has the same name: both would use '
                           f'mask {stem}{split.mask_suffix}; rename one')
            continue
        images[stem] = path
    if not images:
        report.problem('empty-split', split.img_dir,
                       f'no images in the {split.name} split; it cannot be trained or scored')
    masks: Dict[str, str] = {}
    other_masks: Dict[str, str] = {}
    for rel in _walk(split.mask_dir):
        stem, ext = osp.splitext(rel)
        (masks if ext == split.mask_suffix else other_masks)[stem] = osp.join(split.mask_dir,
                                                                              rel)
    for stem, path in other_masks.items():
        if stem in masks:
            continue
        hint = (' JPEG compression changes label values: export the masks losslessly as PNG'
                if osp.splitext(path)[1].lower() in ('.jpg', '.jpeg') else '')
        report.problem('mask-format', path, f'masks must be {split.mask_suffix} files, so this '
                                            f'one is not found for its image.{hint}')
    for stem, path in images.items():
        if stem not in masks and stem not in other_masks:
            report.problem('unpaired-image', path, f'no mask {stem}{split.mask_suffix} in '
                                                   f'{report._rel(split.mask_dir)}')
    for stem, path in masks.items():
        if stem not in images:
            report.problem('unpaired-mask', path, f'no image named {stem}.* in '
                                                  f'{report._rel(split.img_dir)}')

    hist = stats.setdefault(split.name, {})
    for stem in sorted(set(images) & set(masks)):
        img_path, mask_path = images[stem], masks[stem]
        try:
            with Image.open(img_path) as im:
                img_size, orientation = im.size, _exif_orientation(im)
        except Exception as e:
            report.problem('unreadable', img_path, f'cannot open the image ({e})')
            continue
        try:
            with Image.open(mask_path) as mk:
                mode, mask_size = mk.mode, mk.size
                arr = np.asarray(mk) if mode in INDEX_MODES | {'RGB', 'RGBA'} else None
        except Exception as e:
            report.problem('unreadable', mask_path, f'cannot open the mask ({e})')
            continue
        loaded_size = img_size[::-1] if orientation in EXIF_SWAPPING else img_size
        if orientation in EXIF_ROTATING:
            report.problem('exif-rotation', img_path,
                           f'EXIF orientation {orientation}: OpenCV (mmseg) rotates this image '
                           f'when loading it (to {loaded_size[0]}x{loaded_size[1]}), but not its '
                           'mask. Save the pixels upright without the tag (e.g. PIL '
                           'ImageOps.exif_transpose) and make sure the mask matches them')
        elif img_size != mask_size:
            report.problem('size-mismatch', mask_path,
                           f'mask is {mask_size[0]}x{mask_size[1]}, image '
                           f'{osp.basename(img_path)} is {img_size[0]}x{img_size[1]}')
        if mode in ('RGB', 'RGBA'):
            grey = bool((arr[..., 0] == arr[..., 1]).all() and (arr[..., 1] == arr[..., 2]).all())
            how = ('its three channels are equal, a grey index mask saved as RGB: '
                   'tools/convert_masks.py --gray' if grey else
                   'map colours to class indices with tools/convert_masks.py (palette from '
                   'meta.json)')
            report.problem('rgb-mask', mask_path, f'colour ({mode}) mask; masks must hold one '
                                                  f'class index per pixel: {how}')
            continue
        if arr is None:
            report.problem('mask-mode', mask_path,
                           f'pixel format {mode} is not a label mask; save one class index per '
                           'pixel as an 8-bit grey or palette PNG')
            continue
        values, counts = np.unique(arr.astype(np.int64) if arr.dtype == bool else arr,
                                   return_counts=True)
        hist[mask_path] = dict(zip(values.tolist(), counts.tolist()))


def check_values(report: Report, stats: dict, num_classes: int, ignore_index: int,
                 reduce_zero_label: bool, skip=()):
    """``label-out-of-range`` for every mask (but those in ``skip``)."""
    max_label = num_classes if reduce_zero_label else num_classes - 1
    hists = {p: h for s in stats.values() for p, h in s.items() if p not in skip}
    for mask_path, h in hists.items():
        bad = {v: n for v, n in h.items() if v > max_label and v != ignore_index}
        if not bad:
            continue
        shown = ', '.join(f'{v} ({n} px)' for v, n in sorted(bad.items())[:8])
        valid = (f'1..{max_label} (0 = unlabelled)' if reduce_zero_label
                 else f'0..{max_label}')
        report.problem('label-out-of-range', mask_path,
                       f'label values {shown}: valid are {valid} and the ignore index '
                       f'{ignore_index}; fix the mask or num_classes')


def check_binary(report: Report, stats: dict, num_classes: int, ignore_index: int,
                 reduce_zero_label: bool):
    """0/255 masks: no mask anywhere has a foreground label, and some hold 255.

    Returns the masks reported (their values need no other report: same cause).
    """
    if reduce_zero_label:
        return []
    hists = {p: h for s in stats.values() for p, h in s.items()}
    has_fg = any(0 < v < num_classes for h in hists.values() for v in h)
    with_255 = [p for p, h in hists.items() if 255 in h and set(h) <= {0, 255}]
    if has_fg or not with_255:
        return []
    fg = '1' if num_classes == 2 else f'1..{num_classes - 1}'
    fix = ('convert them with tools/convert_masks.py (meta.json palette [[0,0,0],'
           '[255,255,255]]) or save the foreground as 1')
    for path in with_255:
        report.problem('binary-0-255', path,
                       f'mask holds only 0 and 255 and no mask of the dataset holds a label '
                       f'{fg}: 255 is the ignore index ({ignore_index}) or out '
                       f'of range, so the foreground would never be learned; {fix}')
    return with_255


def class_summary(stats: dict, classes: Optional[Sequence[str]], num_classes: int,
                  reduce_zero_label: bool, report: Report):
    """Print per-split pixel shares per class; warn about classes that never occur."""
    for split, hists in stats.items():
        total = Counter()
        for h in hists.values():
            total.update(h)
        n = sum(total.values())
        if not n:
            continue
        names = list(classes) if classes else [str(i) for i in range(num_classes)]
        shares, absent = [], []
        for c in range(num_classes):
            v = c + 1 if reduce_zero_label else c
            label = names[c] if c < len(names) else str(c)
            if total.get(v, 0):
                shares.append(f'{label} {100 * total[v] / n:.1f}%')
            else:
                absent.append(label)
        print(f'{split}: {len(hists)} image/mask pairs; class pixels: ' + ', '.join(shares))
        if absent:
            more = f' and {len(absent) - 20} more' if len(absent) > 20 else ''
            report.warning('class-absent', '', f'{split} split: {len(absent)} class(es) never '
                                               f'present: {", ".join(absent[:20])}{more}')


def _class_defaults(dataset_type: str) -> dict:
    """``img_suffix``, ``seg_map_suffix``, ``reduce_zero_label`` and ``classes`` that an
    mmseg dataset class sets itself (e.g. ADE20KDataset: '.jpg', True, its 150 names)."""
    if dataset_type == 'SegFolderDataset':
        return dict(img_suffix=IMAGE_SUFFIXES, seg_map_suffix='.png', reduce_zero_label=False)
    import inspect
    from mmengine.registry import init_default_scope
    from mmseg.registry import DATASETS
    init_default_scope('mmseg')
    cls = DATASETS.get(dataset_type)
    if not inspect.isclass(cls):
        raise SystemExit(f'error: unknown dataset type {dataset_type!r} in the config')
    out = {k: v.default for k, v in inspect.signature(cls.__init__).parameters.items()
           if k in ('img_suffix', 'seg_map_suffix', 'reduce_zero_label')
           and v.default is not inspect.Parameter.empty}
    out.setdefault('img_suffix', '.jpg')
    out.setdefault('seg_map_suffix', '.png')
    out.setdefault('reduce_zero_label', False)
    out['classes'] = getattr(cls, 'METAINFO', {}).get('classes')
    return out


def splits_from_config(config: str, options: Optional[dict] = None):
    """(splits, settings) of the datasets a config trains and evaluates on."""
    from mmengine.config import Config
    cfg = Config.fromfile(config)
    if options:
        cfg.merge_from_dict(options)
    heads = cfg.model.get('decode_head')
    heads = heads if isinstance(heads, (list, tuple)) else [heads]
    num_classes = heads[-1]['num_classes']
    splits, seen, settings = [], set(), {}
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        ds = (cfg.get(loader) or {}).get('dataset')
        while ds is not None and 'dataset' in ds:     # RepeatDataset and friends
            ds = ds['dataset']
        if not ds or not ds.get('with_masks', True):
            continue
        defaults = _class_defaults(ds['type'])
        root = ds.get('data_root') or ''
        prefix = ds.get('data_prefix', {})
        img_dir = osp.join(root, prefix.get('img_path', ''))
        mask_dir = osp.join(root, prefix.get('seg_map_path', ''))
        if (img_dir, mask_dir) in seen:
            continue
        seen.add((img_dir, mask_dir))
        suffix = ds.get('img_suffix', defaults['img_suffix'])
        splits.append(Split(loader.split('_')[0], img_dir, mask_dir,
                            (suffix,) if isinstance(suffix, str) else suffix,
                            ds.get('seg_map_suffix', defaults['seg_map_suffix'])))
        meta_file = ds.get('meta_file', 'meta.json') if ds['type'] == 'SegFolderDataset' \
            else None
        settings.setdefault('root', root)
        settings.setdefault('meta', osp.join(root, meta_file) if meta_file else None)
        settings.setdefault('classes', (ds.get('metainfo') or {}).get('classes')
                            or defaults.get('classes'))
        settings.setdefault('ignore_index', ds.get('ignore_index', 255))
        settings.setdefault('reduce_zero_label',
                            ds.get('reduce_zero_label', defaults['reduce_zero_label']))
    if not splits:
        raise SystemExit(f'error: {config} has no train/val/test dataset with masks')
    settings['num_classes'] = num_classes
    return splits, settings


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split('\n\n', 2)[2])
    p.add_argument('root', nargs='?', help='dataset folder (with images/, masks/, meta.json)')
    p.add_argument('--config', help='check the datasets of this mmseg config instead')
    p.add_argument('--cfg-options', nargs='+', default=[], metavar='KEY=VALUE',
                   help='with --config: override entries as for tools/train.py, e.g. '
                        'train_dataloader.dataset.data_root=data/other (values are strings)')
    p.add_argument('--splits', nargs='+', default=['train', 'val'],
                   help='split folders under images/ and masks/ (train val)')
    p.add_argument('--num-classes', type=int,
                   help='number of classes (default: length of "classes" in meta.json)')
    p.add_argument('--ignore-index', type=int, default=255,
                   help='label value that marks pixels to ignore (255)')
    p.add_argument('--reduce-zero-label', action='store_true',
                   help='value 0 means unlabelled and value k is class k-1 (ADE20K style)')
    p.add_argument('--meta', default='meta.json', help='metadata file under ROOT (meta.json)')
    p.add_argument('--img-dir', default='images', help='image folder under ROOT (images)')
    p.add_argument('--mask-dir', default='masks', help='mask folder under ROOT (masks)')
    p.add_argument('--mask-suffix', default='.png', help='mask extension (.png)')
    p.add_argument('--quiet', action='store_true', help='print only the summary')
    args = p.parse_args(argv)
    if bool(args.root) == bool(args.config):
        p.error('give a dataset folder or --config (one of them)')
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.config:
        options = {}
        for item in args.cfg_options:
            key, sep, value = item.partition('=')
            if not sep:
                raise SystemExit(f'error: --cfg-options takes KEY=VALUE, got {item!r}')
            options[key] = value
        splits, s = splits_from_config(args.config, options)
        root, meta_path, classes = s['root'], s['meta'], s['classes']
        num_classes, ignore_index = s['num_classes'], s['ignore_index']
        reduce_zero_label = s['reduce_zero_label']
    else:
        root = args.root
        if not osp.isdir(root):
            print(f'ERROR   [missing-dir] {root}: dataset folder does not exist')
            return 1
        splits = [Split(n, osp.join(root, args.img_dir, n), osp.join(root, args.mask_dir, n),
                        mask_suffix=args.mask_suffix) for n in args.splits]
        meta_path, classes = osp.join(root, args.meta), None
        num_classes, ignore_index = args.num_classes, args.ignore_index
        reduce_zero_label = args.reduce_zero_label
    report = Report(root, args.quiet)
    meta = read_meta(meta_path, report) if meta_path else None
    if meta is not None:
        if classes is not None and list(classes) != meta['classes']:
            report.problem('meta', meta_path, f'classes {meta["classes"]} differ from the '
                                              f'config\'s {list(classes)}')
        classes = classes or meta['classes']
        if num_classes is None:
            num_classes = len(meta['classes'])
        elif num_classes != len(meta['classes']):
            report.problem('meta', meta_path, f'{len(meta["classes"])} classes, but '
                                              f'num_classes is {num_classes}')
    elif meta_path and not osp.isfile(meta_path) and not args.config:
        if num_classes is None:
            report.problem('meta', meta_path, 'not found: write it ({"classes": [...], '
                                              '"palette": [...]}) or pass --num-classes')
        else:
            report.warning('meta', meta_path, 'not found: SegFolderDataset then needs the '
                                              'classes in the config')
    if num_classes is None:
        print(f'FAILED: {len(report.problems)} problem(s); the number of classes is unknown')
        return 1
    if classes is not None and len(classes) != num_classes:
        report.problem('meta', args.config or meta_path,
                       f'{len(classes)} class names but num_classes={num_classes}')

    stats: dict = {}
    for split in splits:
        check_split(split, report, num_classes, ignore_index, reduce_zero_label, stats)
    binary = check_binary(report, stats, num_classes, ignore_index, reduce_zero_label)
    check_values(report, stats, num_classes, ignore_index, reduce_zero_label, skip=binary)
    class_summary(stats, classes, num_classes, reduce_zero_label, report)

    if report.problems:
        kinds = Counter(p[0] for p in report.problems)
        files = {p[1] for p in report.problems}
        print(f'FAILED: {len(report.problems)} problem(s) in {len(files)} file(s)/folder(s): '
              + ', '.join(f'{k} x{n}' for k, n in sorted(kinds.items()))
              + '. Fix them and run this check again.')
        return 1
    print(f'OK: {", ".join(s.name for s in splits)} look fine for {num_classes} classes '
          f'(ignore_index {ignore_index}, reduce_zero_label {reduce_zero_label})'
          + (f', {len(report.warnings)} warning(s)' if report.warnings else ''))
    return 0


if __name__ == '__main__':
    sys.exit(main())
