"""Check a dataset before training; report every problem, with file names.

    inline-mm-check-dataset data/my_coco/annotations/train.json   # COCO instances
    inline-mm-check-dataset data/my_dataset                 # images/, masks/, meta.json
    inline-mm-check-dataset --config configs/custom/my.py   # exactly what the config reads
    inline-mm-check-dataset --config CONFIG --cfg-options train_dataloader.dataset.data_root=X
    inline-mm-check-dataset data/my_dataset --quick         # headers only, seconds

Every image and mask is read and decoded in full, as the training pipelines decode
them (images with OpenCV and Pillow, masks with Pillow), on --jobs threads (default:
one per CPU); the summary says how many files, how many bytes and how long. --quick
reads only the image headers (the masks are still decoded for their labels), so
truncated or corrupt images are not found.

Layout checked (names pair up by file stem; see docs/own_data.md)::

    ROOT/meta.json                    {"classes": [...], "palette": [[r, g, b], ...]}
    ROOT/images/{train,val}/NAME.jpg  (.jpeg .png .bmp .tif .tiff .webp)
    ROOT/masks/{train,val}/NAME.png   one class index per pixel

Problems (exit status 1; each line names the file): the codes at the end of --help
(``inline_mm.datasets.problems.PROBLEM_CODES``). Warnings (exit status 0): files in image
folders that are not images, classes that never occur in a split.

A COCO json (instance segmentation or boxes): its images are looked up under the json's
``../images`` (``DATA/annotations/train.json`` -> ``DATA/images``) unless --img-dir DIR
says where ``file_name`` is relative to. Every rule of
``inline_mm.datasets.coco_checks`` runs (schema, duplicate ids, missing or undecodable
images, json width/height against the decoded image with its EXIF orientation, undeclared
or unused categories, degenerate polygons, RLE of the wrong size, empty boxes or boxes
outside the image, images without annotations), then a table per class. Each line names
the file and the annotation or image id; --task detection accepts box-only annotations.

The rules are those of ``inline_mm.datasets.folder_checks`` and ``.image_reading``, which
SegFolderDataset and the training hooks apply too (``--config`` also needs mmengine and mmseg).
"""
import os.path as osp
import sys
import time
from collections import Counter
from typing import List, Optional, Sequence

from inline_mm.cli import doc_parser
from inline_mm.datasets.coco_checks import (FIXER, check_coco_instances, class_table,
                                            fixer_flags)
from inline_mm.datasets.dataset_files import FileTally, default_jobs, parallel_map
from inline_mm.datasets.folder_checks import (IMAGE_SUFFIXES, binary_problems, check_pair,
                                              label_problems, read_meta, scan_split)
from inline_mm.datasets.problems import PROBLEM_CODES, Problem


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

    def add(self, problems: Sequence[Problem], warning: bool = False):
        for p in problems:
            (self.warning if warning else self.problem)(*p)

    def verdict(self, checked: str, threads: int, quick_note: Optional[str], fix: str,
                ok: str, count_files: bool = False) -> int:
        """Prints what was read (``checked``, on how many threads), the caveat of --quick,
        then FAILED with the problems by code (and in how many files) or ``ok`` with the
        number of warnings; returns the exit status."""
        print(f'checked {checked}' + (f' on {threads} threads' if threads > 1 else ''))
        if quick_note:
            print(quick_note)
        if self.problems:
            kinds = Counter(p[0] for p in self.problems)
            files = len({p[1] for p in self.problems})
            print(f'FAILED: {len(self.problems)} problem(s)'
                  + (f' in {files} file(s)/folder(s)' if count_files else '') + ': '
                  + ', '.join(f'{k} x{n}' for k, n in sorted(kinds.items())) + f'. {fix}')
            return 1
        print(ok + (f', {len(self.warnings)} warning(s)' if self.warnings else ''))
        return 0


class Split:
    """One split: where its images and masks are."""

    def __init__(self, name: str, img_dir: str, mask_dir: str,
                 img_suffixes: Sequence[str] = IMAGE_SUFFIXES, mask_suffix: str = '.png'):
        self.name, self.img_dir, self.mask_dir = name, img_dir, mask_dir
        self.img_suffixes = tuple(s.lower() for s in img_suffixes)
        self.mask_suffix = mask_suffix


class Progress:
    """A progress line on stderr for checks that take a while: refreshed in place on a
    terminal, otherwise one line every ``every`` seconds; nothing in the first
    ``after`` seconds (small sets and test logs stay quiet)."""

    def __init__(self, what: str, stream=None, after: float = 2.0, every: float = 30.0):
        self.what, self.stream = what, stream or sys.stderr
        self.tty = self.stream.isatty()
        self.after, self.every = after, (0.2 if self.tty else every)
        self.start = self.last = time.monotonic()
        self.shown = False

    def __call__(self, done: int, total: int):
        now = time.monotonic()
        if now - self.start < self.after or (now - self.last < self.every and done < total):
            return
        self.last = now
        line = (f'{self.what}: {done:,} of {total:,} ({100 * done / total:.0f}%), '
                f'{now - self.start:.0f} s')
        if self.tty:
            self.stream.write(f'\r{line}\033[K')
        else:
            self.stream.write(line + '\n')
        self.stream.flush()
        self.shown = True

    def close(self):
        if self.tty and self.shown:
            self.stream.write('\r\033[K')
            self.stream.flush()


def _pair_task(args):
    img_path, mask_path, decode = args
    return check_pair(img_path, mask_path, read_labels=True, decode=decode)


def check_splits(splits: Sequence[Split], report: Report, stats: dict, decode: bool = True,
                 jobs: int = 1) -> FileTally:
    """Check the splits' files, decoding all pairs on ``jobs`` threads; per-mask label
    histograms go to ``stats[split.name]``. Returns what was read."""
    pairs = []
    for split in splits:
        files = scan_split(split.img_dir, split.mask_dir, split.img_suffixes,
                           split.mask_suffix, split.name)
        report.add(files.warnings, warning=True)
        report.add(files.problems)
        stats.setdefault(split.name, {})
        pairs += [(split.name, img, mask) for img, mask in files.pairs]
    progress = Progress('decoding image/mask pairs' if decode else 'reading image/mask pairs')
    try:
        results = parallel_map(_pair_task, [(img, mask, decode) for _, img, mask in pairs],
                               jobs, progress)
    finally:
        progress.close()
    tally = FileTally(images=len(pairs), masks=len(pairs))
    for (name, _, mask_path), found in zip(pairs, results):
        report.add(found.problems)
        tally.nbytes += found.nbytes
        if found.histogram is not None:
            stats[name][mask_path] = found.histogram
    return tally


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
    """(splits, settings) of the datasets a config (a path or a ``Config``) trains and
    evaluates on."""
    from inline_mm.apis import read_config
    cfg = read_config(config, options)
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
    p = doc_parser(__doc__, skip=2)
    p.epilog += '\nProblem codes:\n' + PROBLEM_CODES
    p.add_argument('root', nargs='?', help='dataset folder (with images/, masks/, meta.json), '
                                           'or a COCO json (DATA/annotations/train.json)')
    p.add_argument('--config', help='check the datasets of this config instead (an mmdet '
                                    'config with COCO files, or an mmseg one)')
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
    p.add_argument('--img-dir', help='folder form: image folder under ROOT (images); COCO '
                                     'json: the folder file_name is relative to (default: '
                                     'the json\'s ../images)')
    p.add_argument('--task', choices=('instance', 'detection'), default='instance',
                   help='COCO json: instance (masks needed, the default) or detection '
                        '(box-only annotations are fine)')
    p.add_argument('--all-warnings', action='store_true',
                   help='COCO json: print every warning (default: the first 10 of a kind)')
    p.add_argument('--mask-dir', default='masks', help='mask folder under ROOT (masks)')
    p.add_argument('--mask-suffix', default='.png', help='mask extension (.png)')
    p.add_argument('--quick', action='store_true',
                   help='read only the image headers (masks are still decoded): seconds '
                        'instead of minutes, but truncated or corrupt images are not found')
    p.add_argument('--jobs', type=int, default=default_jobs(),
                   help='threads that decode the files (default: one per CPU, here '
                        f'{default_jobs()}); 1 decodes on the main thread')
    p.add_argument('--quiet', action='store_true', help='print only the summary')
    args = p.parse_args(argv)
    if bool(args.root) == bool(args.config):
        p.error('give a dataset folder or --config (one of them)')
    if args.jobs < 1:
        p.error(f'--jobs must be at least 1, got {args.jobs}')
    return args


def _print_coco(found, report: Report, all_warnings: bool):
    report.add(found.problems)
    shown = Counter()
    for w in found.warnings:
        shown[w.code] += 1
        if all_warnings or shown[w.code] <= 10:
            report.add([w], warning=True)
        else:
            report.warnings.append(tuple(w))
    hidden = {k: n - 10 for k, n in shown.items() if n > 10 and not all_warnings}
    if hidden:
        print('(' + ', '.join(f'{n} more {k}' for k, n in hidden.items())
              + ' warning(s) not shown: --all-warnings)')
    if found.categories:
        print(f'{found.ann_file}: {_count(found.images, "image")}, '
              f'{_count(found.annotations, "annotation")}, '
              f'{_count(len(found.categories), "category", "categories")} '
              '(label = position in "categories")')
        print(class_table(found))
    print_fix_command(found)


def _count(n: int, one: str, many: str = '') -> str:
    return f'{n:,} {one if n == 1 else many or one + "s"}'


def print_fix_command(found):
    """The fixer command for what a COCO check found, if a copy can fix any of it."""
    errors, warnings, left = fixer_flags(found)
    if not errors and not warnings:
        return
    stem, ext = osp.splitext(found.ann_file)
    if errors:
        covered = len(found.problems) - left
        print(f'The fixer writes a copy with {covered} of the {len(found.problems)} '
              'problem(s) fixed (the export stays as it is; docs/own_instances.md, step 2):\n'
              f'  python {FIXER} {found.ann_file} {stem}_fixed{ext} {" ".join(errors)}')
    if warnings:
        print(f'For the warnings it offers: {" ".join(warnings)} (see each warning)')


def check_coco_files(files, report: Report, decode: bool, jobs: int, all_warnings: bool
                     ) -> FileTally:
    """Check ``[(ann_file, img_dir, task), ...]`` (:func:`check_coco_instances`)."""
    tally, first = FileTally(), None
    for ann_file, img_dir, task in files:
        progress = Progress(f'decoding the images of {osp.basename(ann_file)}' if decode
                            else f'reading the images of {osp.basename(ann_file)}')
        try:
            found = check_coco_instances(ann_file, img_dir, decode, task, jobs,
                                         progress=progress)
        finally:
            progress.close()
        _print_coco(found, report, all_warnings)
        tally += found.tally
        names = [c['name'] for c in found.categories]
        if first is None:
            first = (ann_file, names)
        elif names != first[1]:
            report.problem('category-order', ann_file,
                           f'its categories {names[:10]} differ from those of {first[0]} '
                           f'({first[1][:10]}): mmdet numbers classes by the list order, so '
                           'every file of a config must list the same categories in one order')
    return tally


def coco_files_from_config(cfg) -> list:
    """``[(ann_file, img_dir, task), ...]`` of a built mmdet config's COCO datasets."""
    files = []
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        ds = (cfg.get(loader) or {}).get('dataset')
        while ds is not None and 'dataset' in ds:
            ds = ds['dataset']
        if not ds or not str(ds.get('ann_file', '')).endswith('.json'):
            continue
        root = ds.get('data_root') or ''
        ann = osp.join(root, ds['ann_file'])
        img_dir = osp.join(root, (ds.get('data_prefix') or {}).get('img', ''))
        masks = any(t.get('type') == 'LoadAnnotations' and t.get('with_mask')
                    for t in ds.get('pipeline') or [] if isinstance(t, dict))
        entry = (ann, img_dir, 'instance' if masks else 'detection')
        if entry not in files:
            files.append(entry)
    if not files:
        raise SystemExit('error: the config has no train/val/test dataset with a COCO json')
    return files


def _main_coco(files, args, root: str) -> int:
    report = Report(root, args.quiet)
    start = time.perf_counter()
    tally = check_coco_files(files, report, not args.quick, args.jobs, args.all_warnings)
    seconds = time.perf_counter() - start
    return report.verdict(
        tally.describe(seconds, headers_only=args.quick), min(args.jobs, max(1, tally.images)),
        'quick: image headers only (sizes and EXIF checked): truncated or corrupt images are '
        'not found (run without --quick to decode them)' if args.quick else None,
        'Fix them (in a copy: keep the export) and run this check again.',
        f'OK: {", ".join(osp.basename(f[0]) for f in files)} '
        + ('looks fine' if len(files) == 1 else 'look fine'))


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.root and args.root.endswith('.json'):
        if not osp.isfile(args.root):
            print(f'ERROR   [missing-file] {args.root}: annotation file does not exist')
            return 1
        return _main_coco([(args.root, args.img_dir, args.task)], args, '')
    if args.config:
        from inline_mm.apis import read_config
        cfg = read_config(args.config)
        if cfg.get('default_scope') == 'mmdet':
            options = dict(i.partition('=')[::2] for i in args.cfg_options)
            cfg.merge_from_dict(options)
            return _main_coco(coco_files_from_config(cfg), args, '')
        options = {}
        for item in args.cfg_options:
            key, sep, value = item.partition('=')
            if not sep:
                raise SystemExit(f'error: --cfg-options takes KEY=VALUE, got {item!r}')
            options[key] = value
        splits, s = splits_from_config(cfg, options)
        root, meta_path, classes = s['root'], s['meta'], s['classes']
        num_classes, ignore_index = s['num_classes'], s['ignore_index']
        reduce_zero_label = s['reduce_zero_label']
    else:
        root = args.root
        if not osp.isdir(root):
            print(f'ERROR   [missing-dir] {root}: dataset folder does not exist')
            return 1
        splits = [Split(n, osp.join(root, args.img_dir or 'images', n),
                        osp.join(root, args.mask_dir, n),
                        mask_suffix=args.mask_suffix) for n in args.splits]
        meta_path, classes = osp.join(root, args.meta), None
        num_classes, ignore_index = args.num_classes, args.ignore_index
        reduce_zero_label = args.reduce_zero_label
    report = Report(root, args.quiet)
    meta = None
    if meta_path:
        meta, meta_found = read_meta(meta_path)
        report.add(meta_found)
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
    start = time.perf_counter()
    tally = check_splits(splits, report, stats, decode=not args.quick, jobs=args.jobs)
    seconds = time.perf_counter() - start
    histograms = {p: h for s in stats.values() for p, h in s.items()}
    binary = binary_problems(histograms, num_classes, ignore_index, reduce_zero_label)
    report.add(binary)
    skip = {p.path for p in binary}
    report.add(label_problems({p: h for p, h in histograms.items() if p not in skip},
                              num_classes, ignore_index, reduce_zero_label))
    class_summary(stats, classes, num_classes, reduce_zero_label, report)

    return report.verdict(
        tally.describe(seconds, headers_only=args.quick), min(args.jobs, tally.images),
        'quick: image headers only, images not decoded: truncated or corrupt images are not '
        'found (run without --quick to decode them)' if args.quick else None,
        'Fix them and run this check again.',
        f'OK: {", ".join(s.name for s in splits)} look{"s" * (len(splits) == 1)} fine for '
        f'{_count(num_classes, "class", "classes")} '
        f'(ignore_index {ignore_index}, reduce_zero_label {reduce_zero_label})',
        count_files=True)


if __name__ == '__main__':
    sys.exit(main())
