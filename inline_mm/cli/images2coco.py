"""List a folder of images (no annotations) as a COCO file, for predictions with tools/test.py.

    inline-mm-images2coco data/my_coco/images/predict data/my_coco/annotations/predict.json \\
        --categories-from data/my_coco/annotations/train.json

The file has "images" (width and height as training loads each image: EXIF orientation
applied), no "annotations", and the "categories" of the training file, so that mmdet's
CocoMetric (``format_only=True``, the ``_predict`` templates) writes the predictions with the
training file's category ids. ``file_name`` is relative to --img-root (default: the
``images`` folder next to the output's ``annotations`` folder) when the image lies under it,
else an absolute path.
"""
import json
import os
import os.path as osp
import sys

from inline_mm.cli import doc_parser
from inline_mm.datasets.coco_checks import default_img_dir
from inline_mm.datasets.folder_checks import IMAGE_SUFFIXES
from inline_mm.datasets.image_reading import EXIF_SWAPPING, read_file


def images_json(img_dir: str, categories_from: str, img_root: str) -> dict:
    with open(categories_from) as f:
        categories = json.load(f).get('categories')
    if not categories:
        raise SystemExit(f'error: {categories_from} has no "categories"')
    paths = []
    for dirpath, dirnames, names in os.walk(img_dir):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith('.'))
        paths += [osp.join(dirpath, n) for n in sorted(names)
                  if osp.splitext(n)[1].lower() in IMAGE_SUFFIXES and not n.startswith('.')]
    if not paths:
        raise SystemExit(f'error: no images ({", ".join(IMAGE_SUFFIXES)}) under {img_dir}')
    images, bad = [], []
    root = osp.abspath(img_root)
    for i, path in enumerate(paths):
        read = read_file(path, 'image', decode=False)
        if read.problems:
            bad += [str(p) for p in read.problems]
            continue
        h, w = read.size[::-1] if read.orientation in EXIF_SWAPPING else read.size
        full = osp.abspath(path)
        name = (osp.relpath(full, root).replace(os.sep, '/')
                if full.startswith(root + os.sep) else full)
        images.append(dict(id=i + 1, file_name=name, width=w, height=h))
    if bad:
        raise SystemExit('error: these files are not readable images:\n  ' + '\n  '.join(bad))
    return dict(images=images, annotations=[], categories=categories)


def main(argv=None) -> int:
    p = doc_parser(__doc__)
    p.add_argument('img_dir', help='folder of images (searched recursively)')
    p.add_argument('out', help='the json to write (DATA/annotations/predict.json)')
    p.add_argument('--categories-from', required=True,
                   help='the training json whose categories the predictions use')
    p.add_argument('--img-root', help='folder file_name is relative to (default: the images '
                                      'folder next to the output\'s annotations folder)')
    args = p.parse_args(argv)
    if osp.exists(args.out):
        raise SystemExit(f'error: {args.out} exists; remove it or write another file')
    coco = images_json(args.img_dir, args.categories_from,
                       args.img_root or default_img_dir(args.out))
    os.makedirs(osp.dirname(osp.abspath(args.out)), exist_ok=True)
    with open(args.out, 'w') as f:
        json.dump(coco, f)
    print(f'wrote {args.out}: {len(coco["images"])} images, {len(coco["categories"])} categories')
    return 0


if __name__ == '__main__':
    sys.exit(main())
