"""Why a dataset came out empty, and COCO class names that match nothing: said when the
runner builds its loaders (the row ``empty_dataset_messages`` of :data:`PATCHES`).

mmengine stops a run whose dataset has no samples left with numpy's ``ValueError: need at
least one array to concatenate``; this row names the file, how many images and annotations
it lists, and why none is left. The pre-flight checks of every file are
:class:`inline_mm.engine.DatasetCheckHook`'s.
"""
import difflib
import json
import logging
import os.path as osp
from typing import List, Optional

from mmengine.logging import print_log

from ..datasets.coco_checks import check_coco
from ..datasets.dataset_files import base_datasets
from .patch import BY_ENGINE, Patch, always, wrap_once, wrapped

__all__ = ['PATCHES', 'install', 'installed']


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


def _with_reasons(build):
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
        for base in base_datasets(dataset):
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
    return build_dataloader


def install():
    """Make ``Runner.build_dataloader`` say why a dataset is empty, refuse COCO class
    names that match no category of the file in training (warn in ``test_mode``), and
    log the annotations mmdet skips (idempotent)."""
    from mmengine.runner import Runner
    wrap_once(Runner, 'build_dataloader', '_inline_mm_checked', _with_reasons, static=True)


def installed() -> bool:
    from mmengine.runner import Runner
    return wrapped(Runner, 'build_dataloader', '_inline_mm_checked')


#: the row of the patch table this module switches on (python -m inline_mm.env)
PATCHES = (
    Patch('empty_dataset_messages', 'Runner.build_dataloader: why a dataset is empty; COCO '
          'classes that name no category refused',
          "numpy's 'need at least one array to concatenate' at start-up",
          'every mmengine', BY_ENGINE,
          always('mmengine names no reason for an empty dataset'), installed, install),
)
