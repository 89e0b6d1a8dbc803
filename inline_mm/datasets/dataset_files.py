"""The files that built mmengine datasets refer to, checked before training reaches them
(:func:`check_dataset_files`: on disk, decodable, a mask of its image's size) inside
ConcatDataset / RepeatDataset wrappers (:func:`base_datasets`), on threads
(:func:`parallel_map`), with what was read counted (:class:`FileTally`). Used by
``inline_mm.engine``'s ``DatasetCheckHook``, ``tools/misc/check_dataset.py`` and the COCO
checks.
"""
import os
import os.path as osp
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, List, NamedTuple, Optional, Sequence, Tuple

from .image_reading import read_file, strict_decoders
from .problems import Problem

__all__ = ['default_jobs', 'parallel_map', 'FileTally', 'FileCheck', 'check_sample',
           'check_dataset_files', 'dataset_file_problems', 'base_datasets']


# ------------------------------------------------------------------ many files at once
def default_jobs() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:              # not on Linux
        return os.cpu_count() or 1


def parallel_map(func: Callable, items: Sequence, jobs: Optional[int] = None,
                 progress: Optional[Callable[[int, int], None]] = None) -> list:
    """``[func(item) for item in items]`` on ``jobs`` threads, results in order.

    Threads, not processes: Pillow and OpenCV release the GIL while they read and
    decode, so decoding scales with the threads (1.9x on 2 cores, measured), and
    nothing is forked (a forked worker of a process whose threads hold locks, e.g.
    OpenCV's pool, can wait forever) or spawned (a fresh interpreter per worker costs
    seconds of imports and needs ``if __name__ == '__main__'`` in the calling script).
    Pillow's ``LOAD_TRUNCATED_IMAGES`` and OpenCV's log level are set once for the run
    (:func:`.read_file`'s own per-call setting would race between threads).

    Args:
        func: The function, called once per item.
        items (Sequence): Its arguments.
        jobs (int, optional): Threads; 1 runs on the calling thread. Default: None
            (:func:`default_jobs`).
        progress (callable, optional): Called as ``progress(done, total)`` as results
            come in.
    """
    jobs = default_jobs() if jobs is None else jobs
    if jobs < 1:
        raise ValueError(f'jobs must be >= 1, got {jobs}')
    total, results = len(items), []
    with strict_decoders(), ThreadPoolExecutor(max(1, min(jobs, total))) as pool:
        calls = map(func, items) if jobs == 1 else pool.map(func, items)
        try:
            for result in calls:
                results.append(result)
                if progress is not None:
                    progress(len(results), total)
        finally:
            pool.shutdown(cancel_futures=True)
    return results


@dataclass
class FileTally:
    """How many images and masks a check looked at, and how many bytes it decoded."""
    images: int = 0
    masks: int = 0
    nbytes: int = 0

    def __iadd__(self, other: 'FileTally') -> 'FileTally':
        self.images += other.images
        self.masks += other.masks
        self.nbytes += other.nbytes
        return self

    def describe(self, seconds: float, headers_only: bool = False) -> str:
        """E.g. ``2,020 images and 2,020 masks (412 MB) in 8.3 s``; with
        ``headers_only``, ``2,020 image headers and ...``."""
        noun = 'image header' if headers_only else 'image'
        files = f'{self.images:,} {noun}{"s" * (self.images != 1)}'
        if self.masks:
            files += f' and {self.masks:,} mask{"s" * (self.masks != 1)}'
        read = f' ({_megabytes(self.nbytes)})' if self.nbytes else ''
        return f'{files}{read} in {seconds:.1f} s'


def _megabytes(n: int) -> str:
    if n < 1e6:
        return f'{n / 1e3:.0f} kB'
    if n >= 1e9:
        return f'{n / 1e9:.1f} GB'
    return f'{n / 1e6:.1f} MB' if n < 1e8 else f'{n / 1e6:,.0f} MB'


# ------------------------------------------------------------------ built datasets
class FileCheck(NamedTuple):
    """The result of :func:`check_sample` and :func:`check_dataset_files`."""
    problems: List[Problem]
    tally: FileTally


def check_sample(img: Optional[str], seg: Optional[str] = None, check_sizes: bool = True,
                 decode: bool = True) -> FileCheck:
    """The files of one dataset sample (``img_path``, ``seg_map_path``): on disk,
    decodable (with ``decode``, :func:`.read_file`) and, with ``check_sizes``, of one
    size (from the headers). Without ``decode`` or ``check_sizes`` only their
    existence is checked."""
    problems, tally = [], FileTally()
    img_ok = img is None or osp.isfile(img)
    if not img_ok:
        problems.append(Problem('missing-file', img, 'image file not found'))
    seg_ok = seg is not None and osp.isfile(seg)
    if seg is not None and not seg_ok:
        problems.append(Problem('missing-file', seg, f'mask file not found (for {img})'))
    sizes = check_sizes and seg_ok and img_ok and img is not None
    reads = {}
    for path, kind, ok in ((img, 'image', img_ok), (seg, 'mask', seg_ok)):
        if path is not None and ok and (decode or sizes):
            reads[kind] = read_file(path, kind, decode)
            problems += reads[kind].problems
    tally.images, tally.masks = int(img is not None), int(seg is not None)
    tally.nbytes = sum(r.nbytes for r in reads.values())
    if sizes and not problems:
        img_hw, seg_hw = reads['image'].size, reads['mask'].size
        if img_hw != seg_hw:
            problems.append(Problem('size-mismatch', seg,
                                    f'mask is {seg_hw[0]}x{seg_hw[1]} (HxW) but its image '
                                    f'{img} is {img_hw[0]}x{img_hw[1]}: a mask must label '
                                    'every pixel of its image'))
    return FileCheck(problems, tally)


def _sample_task(args) -> FileCheck:
    return check_sample(*args)


def check_dataset_files(datasets: Sequence, check_sizes: bool = True, decode: bool = True,
                        jobs: Optional[int] = 1, shard: Tuple[int, int] = (0, 1),
                        progress: Optional[Callable[[int, int], None]] = None) -> FileCheck:
    """Check the files that built mmengine datasets refer to (:func:`check_sample`).

    A file listed by several samples or datasets is checked once. ``shard=(rank,
    world_size)`` checks every ``world_size``-th sample from ``rank`` on, so that the
    processes of a distributed run share the work.

    Args:
        datasets (Sequence): Datasets with ``get_data_info`` (mmdet/mmseg datasets).
        check_sizes (bool): Compare segmentation mask and image sizes. Default: True.
        decode (bool): Decode every image and mask in full. Default: True.
        jobs (int, optional): Decoding threads (:func:`parallel_map`). Default: 1.
        shard (tuple[int, int]): ``(rank, world_size)``. Default: ``(0, 1)``.
        progress (callable, optional): ``progress(done, total)``.

    Returns:
        FileCheck: problems sorted by path, and what was read.
    """
    rank, world_size = shard
    if not 0 <= rank < world_size:
        raise ValueError(f'shard must be (rank, world_size) with 0 <= rank < world_size, '
                         f'got {shard}')
    samples = {}
    for dataset in datasets:
        for i in range(len(dataset)):
            info = dataset.get_data_info(i)
            samples[(info.get('img_path'), info.get('seg_map_path'))] = None
    tasks = [(img, seg, check_sizes, decode) for img, seg in list(samples)[rank::world_size]]
    problems, tally = [], FileTally()
    for found in parallel_map(_sample_task, tasks, jobs, progress):
        problems += found.problems
        tally += found.tally
    return FileCheck(sorted(problems, key=lambda p: (p.path, p.code)), tally)


def dataset_file_problems(dataset, check_sizes: bool = True, decode: bool = False
                          ) -> List[Problem]:
    """Problems with the files a built mmengine dataset refers to: every ``img_path``
    (and ``seg_map_path``, when present) exists, decodes in full with ``decode``, and,
    with ``check_sizes``, a segmentation mask has its image's size (read from the file
    headers). EXIF rotations are not applied here; ``tools/misc/check_dataset.py`` reports
    those. See :func:`check_dataset_files` for a parallel check with counts."""
    return check_dataset_files([dataset], check_sizes, decode).problems


def base_datasets(dataset) -> list:
    """The datasets holding files, inside ConcatDataset / RepeatDataset wrappers."""
    if dataset is None:
        return []
    if hasattr(dataset, 'datasets'):
        return [d for inner in dataset.datasets for d in base_datasets(inner)]
    inner = getattr(dataset, 'dataset', None)
    if inner is not None and hasattr(inner, 'get_data_info'):
        return base_datasets(inner)
    return [dataset] if hasattr(dataset, 'get_data_info') else []
