"""A semantic-segmentation dataset for the folder layout people actually have."""
import os.path as osp
from typing import List, Optional, Sequence, Union

from mmseg.datasets import BaseSegDataset

from .folder_checks import IMAGE_SUFFIXES, read_meta, scan_split

__all__ = ['SegFolderDataset', 'IMAGE_SUFFIXES', 'load_meta']


def load_meta(path: str) -> dict:
    """Read and validate a dataset metadata file.

    The file is JSON: ``{"classes": [names...], "palette": [[r, g, b], ...]}``; the
    palette is optional (one colour per class, used for predicted masks and plots).
    The rules are those of :func:`.folder_checks.meta_problems` (as in tools/misc/check_dataset.py).

    Raises:
        FileNotFoundError: when ``path`` does not exist.
        ValueError: when the file is not valid JSON or its entries are malformed.
    """
    if not osp.isfile(path):
        raise FileNotFoundError(
            f'dataset metadata file {path} not found. Write it as JSON, e.g. '
            '{"classes": ["background", "road"], "palette": [[0, 0, 0], [128, 64, 128]]}')
    meta, problems = read_meta(path)
    if problems:
        raise ValueError(str(problems[0]))
    return meta


class SegFolderDataset(BaseSegDataset):
    """Semantic segmentation from a folder of images and a folder of masks.

    Layout (names pair up by file stem; images may mix formats)::

        data_root/meta.json                    {"classes": [...], "palette": [[r,g,b], ...]}
        data_root/images/train/a.jpg, b.png    images
        data_root/masks/train/a.png, b.png     one class index per pixel (uint8 PNG,
                                               grey or palette mode; not RGB colours)
        data_root/images/val/..., masks/val/...

    Classes come from ``metainfo['classes']`` (the config) and/or the metadata file;
    when both are given they must be identical, so a config cannot silently train
    on a relabelled dataset. The palette comes from the metadata file (or is
    generated). Run ``tools/misc/check_dataset.py`` before training: it reports every
    problem of a dataset at once; this class only refuses what would break training.

    Args:
        meta_file (str, optional): Metadata file, relative to ``data_root``.
            ``None`` or a missing file is allowed when ``metainfo`` gives the classes.
            Default: ``'meta.json'``.
        img_suffix (str | Sequence[str]): Image extension(s), case-insensitive.
            Default: ``IMAGE_SUFFIXES``.
        seg_map_suffix (str): Mask extension. Default: ``'.png'``.
        with_masks (bool): ``False`` for images without masks (prediction only);
            the pipeline must then not contain ``LoadAnnotations``. Default: True.
        **kwargs: Arguments of mmseg's ``BaseSegDataset`` (``data_root``,
            ``data_prefix=dict(img_path=..., seg_map_path=...)``, ``metainfo``,
            ``pipeline``, ``reduce_zero_label``, ``ignore_index``, ...).
    """

    METAINFO = dict()

    def __init__(self, meta_file: Optional[str] = 'meta.json',
                 img_suffix: Union[str, Sequence[str]] = IMAGE_SUFFIXES,
                 seg_map_suffix: str = '.png', with_masks: bool = True, **kwargs):
        data_root = kwargs.get('data_root')
        self.meta_file = (osp.join(data_root or '', meta_file) if meta_file else None)
        self.with_masks = with_masks
        kwargs['metainfo'] = self._merge_metainfo(kwargs.get('metainfo'))
        ignore_index = kwargs.get('ignore_index', 255)
        if kwargs.get('reduce_zero_label') and ignore_index != 255:
            raise ValueError(
                'reduce_zero_label=True maps label 0 to 255 (mmseg fixes that value), so '
                f'ignore_index must be 255, got {ignore_index}')
        suffixes = (img_suffix,) if isinstance(img_suffix, str) else tuple(img_suffix)
        super().__init__(img_suffix=tuple(s.lower() for s in suffixes),
                         seg_map_suffix=seg_map_suffix, **kwargs)

    def _merge_metainfo(self, metainfo: Optional[dict]) -> dict:
        metainfo = dict(metainfo or {})
        if self.meta_file and osp.isfile(self.meta_file):
            meta = load_meta(self.meta_file)
            given = metainfo.get('classes')
            if given is not None and list(given) != meta['classes']:
                raise ValueError(
                    f'classes in the config {list(given)} differ from those in '
                    f'{self.meta_file} {meta["classes"]}: mask value i means class '
                    f'classes[i], so both must list the same names in the same order')
            metainfo['classes'] = tuple(meta['classes'])
            if meta.get('palette') and 'palette' not in metainfo:
                metainfo['palette'] = [list(p) for p in meta['palette']]
        elif metainfo.get('classes') is None:
            where = self.meta_file or '(meta_file=None)'
            raise FileNotFoundError(
                f'no classes for SegFolderDataset: {where} does not exist and the config '
                'gives no metainfo=dict(classes=...). Write the metadata file '
                '(see tools/misc/make_toy_dataset.py folder) or pass the classes')
        return metainfo

    def load_data_list(self) -> List[dict]:
        img_dir = self.data_prefix.get('img_path', '')
        ann_dir = self.data_prefix.get('seg_map_path', '')
        if not osp.isdir(img_dir):
            raise FileNotFoundError(f'image folder {img_dir} not found (data_root + '
                                    "data_prefix['img_path'])")
        if self.with_masks and not osp.isdir(ann_dir):
            raise FileNotFoundError(f'mask folder {ann_dir} not found (data_root + '
                                    "data_prefix['seg_map_path']); for images without "
                                    'masks use with_masks=False')
        files = scan_split(img_dir, ann_dir if self.with_masks else None, self.img_suffix,
                           self.seg_map_suffix)
        for problem in files.problems:
            if problem.code == 'duplicate-name':
                raise ValueError(f'{problem}; two images with one name would share one mask')
        if not files.images:
            raise FileNotFoundError(
                f'no images ({", ".join(self.img_suffix)}) in {img_dir}: an empty split '
                'cannot be trained or evaluated')
        data_list, missing = [], []
        for stem, img_path in files.images.items():
            info = dict(img_path=img_path, label_map=self.label_map,
                        reduce_zero_label=self.reduce_zero_label, seg_fields=[])
            if self.with_masks:
                info['seg_map_path'] = files.masks.get(
                    stem, osp.join(ann_dir, stem + self.seg_map_suffix))
                if stem not in files.masks:
                    missing.append(info['seg_map_path'])
            data_list.append(info)
        if missing:
            shown = ', '.join(missing[:5]) + (f' and {len(missing) - 5} more'
                                              if len(missing) > 5 else '')
            raise FileNotFoundError(f'{len(missing)} image(s) in {img_dir} have no mask: '
                                    f'{shown}. Run tools/misc/check_dataset.py for a full report')
        return sorted(data_list, key=lambda x: x['img_path'])
