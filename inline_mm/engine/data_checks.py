"""Bad training data: clear errors, early, instead of silent damage or late crashes.

What mmdet 3.3 / mmseg 1.2 do on their own (measured; see the README "Reliability"
table and ``tests/test_reliability_data.py``):

* grayscale and RGBA images: ``LoadImageFromFile`` (``color_type='color'``, the
  default of every config here) decodes them as 3-channel BGR. Nothing to fix.
* a COCO file whose images all lack annotations (or with none at all): training drops
  images without annotations, and mmengine then stops at start-up with
  ``ValueError: need at least one array to concatenate``. :func:`install` turns that
  into an error that says which file, how many images and annotations it has, and why
  nothing is left.
* an image listed in the COCO file but missing on disk: ``FileNotFoundError`` naming
  the file, but only when a data worker reaches it, possibly hours into training.
  :class:`DatasetCheckHook` finds every missing file before the first iteration.
* a segmentation mask of another size than its image: **silently** trained on.
  ``RandomResize`` rescales image and mask into the same box, so a half-size mask
  ends up stretched over the image; evaluation then crashes with an ``IndexError``
  about shapes after the whole run. :class:`~.transforms.CheckSegMapSize` (a pipeline step) and
  :class:`DatasetCheckHook` (all files up front) refuse it, naming both files.
"""
import difflib
import functools
import logging
import os.path as osp
from typing import List, Optional

from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmengine.registry import HOOKS

from ..datasets.checks import Problem, check_coco, dataset_file_problems

__all__ = ['DatasetCheckHook', 'check_coco', 'dataset_file_problems',
           'install', 'installed']

#: at most this many problems are listed in one error message (the count is exact)
MAX_LISTED = 20


def _listing(problems: List[Problem]) -> str:
    shown = '\n  '.join(str(p) for p in problems[:MAX_LISTED])
    more = len(problems) - MAX_LISTED
    return '  ' + shown + (f'\n  ... and {more} more' if more > 0 else '')


def _base_datasets(dataset) -> list:
    """The datasets holding files, inside ConcatDataset / RepeatDataset wrappers."""
    if dataset is None:
        return []
    if hasattr(dataset, 'datasets'):
        return [d for inner in dataset.datasets for d in _base_datasets(inner)]
    inner = getattr(dataset, 'dataset', None)
    if inner is not None and hasattr(inner, 'get_data_info'):
        return _base_datasets(inner)
    return [dataset] if hasattr(dataset, 'get_data_info') else []


@HOOKS.register_module()
class DatasetCheckHook(Hook):
    """Check every file of the train/val/test datasets before the first iteration.

    Raises one ``FileNotFoundError`` / ``ValueError`` listing all missing images or
    masks and all masks whose size differs from their image, instead of a crash
    when a data worker reaches the first of them (or silent training on a
    mis-sized mask). Off by default; switch it on with::

        custom_hooks = [dict(type='DatasetCheckHook')]

    Costs one ``stat`` per file, plus two header reads per image/mask pair with
    ``check_sizes`` (a few seconds for ADE20K's 25k pairs).

    Args:
        check_sizes (bool): Compare segmentation mask and image sizes. Default: True.
        splits (tuple[str]): Which dataloaders to check, of ``'train'``, ``'val'``,
            ``'test'``. Default: ``('train', 'val')``.
    """

    priority = 'VERY_HIGH'

    def __init__(self, check_sizes: bool = True, splits=('train', 'val')):
        unknown = set(splits) - {'train', 'val', 'test'}
        if unknown:
            raise ValueError(f"DatasetCheckHook: unknown split(s) {sorted(unknown)}; use "
                             "'train', 'val', 'test'")
        self.check_sizes = check_sizes
        self.splits = tuple(splits)

    def _check(self, runner, splits):
        problems = []
        for split in splits:
            loop = getattr(runner, f'_{split}_loop', None)
            loader = getattr(loop, 'dataloader', None)
            for dataset in _base_datasets(getattr(loader, 'dataset', None)):
                problems += dataset_file_problems(dataset, self.check_sizes)
        if problems:
            missing = all(p.code == 'missing-file' for p in problems)
            message = (f'DatasetCheckHook: {len(problems)} problem(s) with the data files, '
                       'found before training started:\n' + _listing(problems) +
                       '\nFix or remove these samples (tools/check_dataset.py reports '
                       'segmentation folders in detail).')
            runner.logger.error(message)
            raise (FileNotFoundError if missing else ValueError)(message)
        runner.logger.info(f'DatasetCheckHook: data files of {", ".join(splits)} checked')

    def before_train(self, runner):
        self._check(runner, [s for s in self.splits if s in ('train', 'val')])

    def before_test(self, runner):
        if 'test' in self.splits:
            self._check(runner, ['test'])


# ------------------------------------------------------------------ empty datasets
def _describe_empty(dataset_cfg) -> Optional[str]:
    """Why a dataset from ``dataset_cfg`` came out empty, when it can be told."""
    if not isinstance(dataset_cfg, dict):
        return None
    # RepeatDataset / ClassBalancedDataset / ConcatDataset: describe what they wrap.
    inner = dataset_cfg.get('dataset') or (dataset_cfg.get('datasets') or [None])[0]
    if isinstance(inner, dict) and 'ann_file' not in dataset_cfg:
        return _describe_empty(inner)
    ann = dataset_cfg.get('ann_file') or ''
    root = dataset_cfg.get('data_root') or ''
    path = osp.join(root, ann) if ann and not osp.isabs(ann) else ann
    what = f"{dataset_cfg.get('type', 'dataset')}"
    if path.endswith('.json') and osp.isfile(path):
        summary = check_coco(path)
        facts = (f'{path} lists {summary["images"]} images and {summary["annotations"]} '
                 f'annotations ({summary["annotated_images"]} images annotated)')
        hint = str(summary['problems'][0]) if summary['problems'] else (
            'check metainfo.classes against the file\'s category names and the '
            'filter_cfg (min_size) of the dataset')
        return f'{what} has no samples: {facts}. {hint}.'
    prefix = dataset_cfg.get('data_prefix') or {}
    return (f'{what} has no samples: nothing was found under data_root={root!r}, '
            f'data_prefix={dict(prefix)!r}, ann_file={ann!r}. Check these paths and the '
            'file suffixes.')


# ------------------------------------------------------------------ COCO classes
def coco_class_problems(dataset) -> List[str]:
    """What is wrong between a built mmdet COCO dataset's ``classes`` and its file.

    mmdet keeps the annotations whose category *name* is in ``metainfo['classes']``
    and drops the rest without a word. Training on a subset of a file's categories
    is what that is for; a class name that matches no category (a typo, another
    naming) is not: that class then has no annotations at all. Uses only what the
    built dataset keeps (``cat_ids``, ``cat_img_map``); the file is read again only to
    name the unmatched classes.

    Returns:
        list[str]: One message per problem (empty when the classes fit the file).
    """
    classes = list((getattr(dataset, 'metainfo', None) or {}).get('classes') or ())
    cat_ids = getattr(dataset, 'cat_ids', None)
    if cat_ids is None or not classes or len(cat_ids) >= len(classes):
        return []
    ann_file = getattr(dataset, 'ann_file', '')
    names = []
    try:
        import json
        with open(ann_file) as f:
            names = [c.get('name') for c in json.load(f).get('categories') or []]
    except (OSError, ValueError, AttributeError):
        pass
    missing = [c for c in classes if c not in names] if names else []
    which = (f'{missing} of the config\'s classes are not category names of {ann_file}' if
             missing else f'only {len(cat_ids)} of the config\'s {len(classes)} classes are '
             f'category names of {ann_file}')
    hints = []
    for name in missing:
        close = difflib.get_close_matches(name, [n for n in names if n], n=1)
        if close:
            hints.append(f'{name!r} -> {close[0]!r}?')
    return [f'{which} (its categories: {names[:20]}{" ..." if len(names) > 20 else ""}). '
            'mmdet would train those classes on no annotation at all. Make metainfo.classes '
            'name the file\'s categories' + (f' ({", ".join(hints)})' if hints else '')]


def dropped_annotations(dataset) -> Optional[str]:
    """One line saying how many annotations mmdet skips because their category is not
    in ``classes`` (None when it skips none)."""
    cat_ids = getattr(dataset, 'cat_ids', None)
    cat_img_map = getattr(dataset, 'cat_img_map', None)
    if cat_ids is None or not cat_img_map:
        return None
    kept = set(cat_ids)
    dropped = {c: len(v) for c, v in cat_img_map.items() if c not in kept and len(v)}
    if not dropped:
        return None
    return (f'{getattr(dataset, "ann_file", "the COCO file")}: {sum(dropped.values())} '
            f'annotation(s) of {len(dropped)} category id(s) not in metainfo.classes are not '
            f'trained on (ids {sorted(dropped)[:10]}{" ..." if len(dropped) > 10 else ""})')


def install():
    """Make ``Runner.build_dataloader`` say why a dataset is empty, refuse COCO class
    names that match no category of the file in training (warn in ``test_mode``), and
    log the annotations mmdet skips (idempotent)."""
    from mmengine.runner import Runner

    build = Runner.build_dataloader
    if getattr(build, '_inline_mm_checked', False):
        return

    @functools.wraps(build)
    def build_dataloader(dataloader, seed=None, diff_rank_seed=False):
        dataset_cfg = dataloader.get('dataset') if isinstance(dataloader, dict) else None
        try:
            loader = build(dataloader, seed=seed, diff_rank_seed=diff_rank_seed)
        except ValueError as e:
            # mmengine's message for a dataset with no samples left.
            if 'need at least one array to concatenate' not in str(e):
                raise
            why = _describe_empty(dataset_cfg)
            if why is None:
                raise
            raise ValueError(why) from e
        dataset = getattr(loader, 'dataset', None)
        if getattr(dataset, '_fully_initialized', True) and dataset is not None \
                and len(dataset) == 0:
            why = _describe_empty(dataset_cfg) or 'the dataset has no samples'
            raise ValueError(why)
        for base in _base_datasets(dataset):
            problems = coco_class_problems(base)
            # Training on a class without annotations is a mistake; evaluating or
            # analysing (get_flops, browse_dataset on a stand-in set) with one is not.
            if problems and not getattr(base, 'test_mode', False):
                raise ValueError(problems[0])
            for problem in problems:
                print_log(problem, logger='current', level=logging.WARNING)
            dropped = dropped_annotations(base)
            if dropped:
                print_log(dropped, logger='current', level=logging.WARNING)
        return loader

    build_dataloader._inline_mm_checked = True
    Runner.build_dataloader = staticmethod(build_dataloader)


def installed() -> bool:
    from mmengine.runner import Runner
    return getattr(Runner.build_dataloader, '_inline_mm_checked', False)
