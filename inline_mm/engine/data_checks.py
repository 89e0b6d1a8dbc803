"""Bad training data: clear errors, early, instead of silent damage or late crashes.

What mmdet 3.3 / mmseg 1.2 do on their own (measured; see the table of
docs/reliability.md and ``tests/test_reliability_data.py``):

* grayscale and RGBA images: ``LoadImageFromFile`` (``color_type='color'``, the
  default of every config here) decodes them as 3-channel BGR. Nothing to fix.
* a COCO file whose images all lack annotations (or with none at all): training drops
  images without annotations, and mmengine then stops at start-up with ``ValueError: need at least
  one array to concatenate``. :mod:`inline_mm.patches.empty_datasets` turns that into an error that
  says which file, how many images and annotations it has, and why nothing is left.
* an image listed in the COCO file but missing on disk: ``FileNotFoundError`` naming
  the file, but only when a data worker reaches it, possibly hours into training.
  :class:`DatasetCheckHook` finds every missing file before the first iteration.
* a truncated or corrupt image or mask (a cut download, a text file named .jpg):
  ``AssertionError: failed to load image`` (mmcv) or Pillow's ``OSError`` when a data
  worker reaches the file, possibly hours in. :class:`DatasetCheckHook` decodes every
  file before the first iteration and names every one that does not decode.
* a segmentation mask of another size than its image: **silently** trained on.
  ``RandomResize`` rescales image and mask into the same box, so a half-size mask
  ends up stretched over the image; evaluation then crashes with an ``IndexError``
  about shapes after the whole run. :class:`~.transforms.CheckSegMapSize` (a pipeline step)
  and
  :class:`DatasetCheckHook` (all files up front) refuse it, naming both files.
"""
import os
import time
from typing import List, Optional, Sequence

from mmengine import dist
from mmengine.hooks import Hook
from mmengine.registry import HOOKS

from ..datasets.coco_checks import check_coco, check_coco_instances
from ..datasets.dataset_files import (FileTally, base_datasets, check_dataset_files,
                                      dataset_file_problems, default_jobs)
from ..datasets.problems import Problem

__all__ = ['DatasetCheckHook', 'check_coco', 'dataset_file_problems']

#: at most this many problems are listed in one error message (the count is exact)
MAX_LISTED = 20


def _listing(problems: List[Problem], limit: Optional[int] = MAX_LISTED) -> str:
    limit = len(problems) if limit is None else limit
    shown = '\n  '.join(str(p) for p in problems[:limit])
    more = len(problems) - limit
    return '  ' + shown + (f'\n  ... and {more} more' if more > 0 else '')


def _coco_file(dataset) -> Optional[str]:
    """The COCO json of an mmdet COCO-style dataset, else None."""
    ann_file = getattr(dataset, 'ann_file', None)
    if isinstance(ann_file, str) and ann_file.endswith('.json') and hasattr(dataset, 'cat_ids'):
        return ann_file
    return None


def _loads_masks(dataset) -> bool:
    """Whether the dataset's pipeline reads instance masks (LoadAnnotations with_mask)."""
    transforms = getattr(getattr(dataset, 'pipeline', None), 'transforms', None) or []
    return any(type(t).__name__ == 'LoadAnnotations' and getattr(t, 'with_mask', False)
               for t in transforms)


def coco_dataset_problems(datasets, decode: bool = True, jobs: int = 1,
                          shard=(0, 1)) -> tuple:
    """``(problems, warnings, tally)`` of the COCO datasets among ``datasets``: the rules of
    :func:`~inline_mm.datasets.coco_checks.check_coco_instances` on each json (masks
    required where the pipeline loads them), images read for ``shard``, and the order of the
    config's classes against each file's categories (mmdet numbers the categories in the
    file's order, whatever the order of ``metainfo.classes``)."""
    problems, warnings, tally, seen = [], [], FileTally(), {}
    for ds in datasets:
        ann_file = _coco_file(ds)
        if ann_file is None:
            continue
        task = 'instance' if _loads_masks(ds) else 'detection'
        img_dir = (getattr(ds, 'data_prefix', None) or {}).get('img', '')
        key = (ann_file, img_dir)
        if key in seen and (seen[key] == 'instance' or task == 'detection'):
            continue
        seen[key] = task
        found = check_coco_instances(ann_file, img_dir, decode, task, jobs, shard=shard)
        problems += found.problems
        warnings += found.warnings
        tally += found.tally
        classes = list((getattr(ds, 'metainfo', None) or {}).get('classes') or ())
        names = [c['name'] for c in found.categories]
        in_file = [n for n in names if n in classes]
        if classes and in_file != [c for c in classes if c in names]:
            problems.append(Problem(
                'category-order', ann_file,
                f'its categories list the classes in another order ({in_file[:10]}) than '
                f"the config's metainfo.classes ({classes[:10]}): mmdet would give class i's "
                "name to the file's i-th category. Use the file's order (the own-data "
                'templates read it from train.json; val.json must list the same order)'))
    return problems, warnings, tally


@HOOKS.register_module()
class DatasetCheckHook(Hook):
    """Check every file of the train/val/test datasets before the first iteration; when
    training, before the model's weights are loaded (``before_run``), so that a data error
    comes first, not after a download of pretrained weights (or its failure offline).

    COCO datasets (mmdet's ``CocoDataset`` and kin) get every rule of
    ``tools/misc/check_dataset.py`` on their json (:mod:`inline_mm.datasets.coco_checks`:
    schema, ids, categories, polygons, RLE, boxes, json sizes against the images, masks
    present where the pipeline loads them) and the config's class order against the file's.

    Raises one ``FileNotFoundError`` / ``ValueError`` listing all missing images or
    masks, all files that do not decode in full (``truncated``, ``corrupt``,
    ``unreadable``: the rules of ``inline_mm.datasets.image_reading.read_file``) and all
    masks whose size differs from their image, instead of a crash when a data worker
    reaches the first of them (or silent training on a mis-sized mask). Every rank
    raises the same error. On in the own-data template; elsewhere switch it on with::

        custom_hooks = [dict(type='DatasetCheckHook')]

    With ``decode`` every image is decoded as ``LoadImageFromFile`` does (OpenCV) and
    strictly by Pillow, and every mask as ``LoadAnnotations`` does (Pillow):
    ~4 ms per 683x512 pair on one core, ~2 min for ADE20K's 25,574 pairs
    (docs/reliability.md), shared by the ranks of a distributed run. ``decode=False``
    reads only the headers (seconds).
    The log line says how many files, bytes and seconds.

    With several processes, rank ``r`` of ``n`` checks every ``n``-th sample from
    ``r`` on; the problems are then gathered (``mmengine.dist.all_gather_object``), so
    that all ranks fail together with the complete list and none waits at a later
    collective for one that failed.

    Args:
        check_sizes (bool): Compare segmentation mask and image sizes. Default: True.
        decode (bool): Decode every image and mask in full. Default: True.
        num_workers (int, optional): Decoding threads per rank; 1 decodes on the main
            thread. Default: None (the CPUs divided by the ranks on this
            machine).
        splits (tuple[str]): Which dataloaders to check, of ``'train'``, ``'val'``,
            ``'test'``. Default: ``('train', 'val')``.
        warn_only (Sequence[str]): Problem codes logged as warnings instead of stopping
            the run, e.g. ``('box-empty', 'polygon')`` for COCO 2017 itself, which holds a
            few annotations mmdet drops. Default: ``()``.
    """

    priority = 'VERY_HIGH'

    def __init__(self, check_sizes: bool = True, decode: bool = True,
                 num_workers: Optional[int] = None, splits=('train', 'val'),
                 warn_only: Sequence[str] = ()):
        unknown = set(splits) - {'train', 'val', 'test'}
        if unknown:
            raise ValueError(f"DatasetCheckHook: unknown split(s) {sorted(unknown)}; use "
                             "'train', 'val', 'test'")
        if num_workers is not None and num_workers < 1:
            raise ValueError(f'DatasetCheckHook: num_workers must be >= 1 or None, got '
                             f'{num_workers}')
        self.check_sizes = check_sizes
        self.decode = decode
        self.num_workers = num_workers
        self.splits = tuple(splits)
        self.warn_only = frozenset(warn_only)

    def _workers(self) -> int:
        if self.num_workers is not None:
            return self.num_workers
        try:
            local = dist.get_local_size()
        except RuntimeError:    # no local group (mmengine makes one only for some launchers)
            local = int(os.environ.get('LOCAL_WORLD_SIZE') or dist.get_world_size())
        return max(1, default_jobs() // max(1, local))

    def _check(self, runner, splits):
        start = time.perf_counter()
        datasets = []
        for split in splits:
            loop = getattr(runner, f'_{split}_loop', None)
            loader = getattr(loop, 'dataloader', None)
            datasets += base_datasets(getattr(loader, 'dataset', None))
        rank, world_size = dist.get_rank(), dist.get_world_size()
        last = [start]

        def progress(done, total):
            now = time.perf_counter()
            if now - last[0] >= 30 and done < total:
                last[0] = now
                runner.logger.info(f'DatasetCheckHook: {done:,} of {total:,} samples '
                                   f'checked ({now - start:.0f} s)')
        coco = [d for d in datasets if _coco_file(d) is not None]
        others = [d for d in datasets if _coco_file(d) is None]
        warnings = []
        try:
            found = check_dataset_files(others, self.check_sizes, self.decode,
                                        jobs=self._workers(), shard=(rank, world_size),
                                        progress=progress)
            coco_problems, warnings, coco_tally = coco_dataset_problems(
                coco, self.decode, self._workers(), (rank, world_size))
            found.problems.extend(coco_problems)
            found.tally.__iadd__(coco_tally)
            failure = None
        except Exception as e:
            if world_size == 1:
                raise
            found, failure = None, f'rank {rank}: {type(e).__name__}: {e}'
        problems, tally = (found.problems, found.tally) if found else ([], FileTally())
        for warning in dict.fromkeys(warnings):
            runner.logger.warning(f'DatasetCheckHook: {warning}')
        seconds = time.perf_counter() - start
        if world_size > 1:
            # Every rank gets all problems (and failures), so all raise or go on together.
            gathered = dist.all_gather_object((problems, tally, seconds, failure))
            failures = [f for *_, f in gathered if f]
            if failures:
                raise RuntimeError('DatasetCheckHook failed: ' + '; '.join(failures))
            # (the rules on a COCO file run on every rank: each reports them once)
            problems = sorted(dict.fromkeys(p for part, *_ in gathered for p in part),
                              key=lambda p: (p.path, p.code))
            tally = FileTally()
            for _, part, *_ in gathered:
                tally += part
            seconds = max(s for _, _, s, _ in gathered)
        for p in (p for p in problems if p.code in self.warn_only):
            runner.logger.warning(f'DatasetCheckHook: [{p.code}] {p}')
        problems = [p for p in problems if p.code not in self.warn_only]
        checked = tally.describe(seconds, headers_only=not self.decode)
        if problems:
            missing = all(p.code == 'missing-file' for p in problems)
            head = (f'DatasetCheckHook: {len(problems)} problem(s) with the data files, '
                    f'found before training started (checked {checked}):\n')
            tail = ('\nFix or remove these samples (tools/misc/check_dataset.py reports '
                    'segmentation folders and COCO files in detail).')
            runner.logger.error(head + _listing(problems, limit=None) + tail)
            raise (FileNotFoundError if missing else ValueError)(
                head + _listing(problems) + tail)
        how = 'decoded' if self.decode else 'headers only'
        ranks = f', {world_size} ranks' if world_size > 1 else ''
        runner.logger.info(f'DatasetCheckHook: {", ".join(splits)}: checked {checked} '
                           f'({how}, {self._workers()} thread(s){ranks})')

    def before_run(self, runner):
        # Training: check before the model's weights are loaded (a download that fails
        # offline, or takes minutes, should not come before the data's errors).
        from mmengine.runner import BaseLoop
        if isinstance(getattr(runner, '_train_loop', None), BaseLoop):
            self.before_train(runner)

    def before_train(self, runner):
        if getattr(self, '_checked_for', None) is runner:
            return
        self._checked_for = runner
        self._check(runner, [s for s in self.splits if s in ('train', 'val')])

    def before_test(self, runner):
        if 'test' in self.splits:
            self._check(runner, ['test'])
