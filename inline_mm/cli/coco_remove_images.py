"""Write a copy of a COCO file without some images and their annotations.

    inline-mm-coco-remove-images data/my_coco/annotations/train_export.json \\
        data/my_coco/annotations/train.json --images train/0007.jpg train/0012.jpg

For images the checker names that cannot be fixed now (a truncated copy, a photo to
annotate again). The input is never changed: the output must be another file.
"""
import json
import os.path as osp
import sys

from inline_mm.cli import doc_parser


def main(argv=None) -> int:
    p = doc_parser(__doc__)
    p.add_argument('src', help='the COCO json to read')
    p.add_argument('out', help='the json to write (not the input)')
    p.add_argument('--images', nargs='+', required=True, metavar='FILE_NAME',
                   help='file_name values (as in the json) of the images to leave out')
    args = p.parse_args(argv)
    if osp.exists(args.out) and osp.samefile(args.src, args.out):
        raise SystemExit('error: write the result to another file (the input is kept as is)')
    if osp.exists(args.out):
        raise SystemExit(f'error: {args.out} exists; remove it or write another file')
    with open(args.src) as f:
        coco = json.load(f)
    drop = {im['id'] for im in coco.get('images', []) if im.get('file_name') in args.images}
    found = {im['file_name'] for im in coco.get('images', []) if im['id'] in drop}
    unknown = sorted(set(args.images) - found)
    if unknown:
        raise SystemExit(f'error: {args.src} lists no image with file_name {unknown}')
    n_anns = len(coco.get('annotations', []))
    coco['images'] = [im for im in coco['images'] if im['id'] not in drop]
    coco['annotations'] = [a for a in coco.get('annotations', []) if a.get('image_id') not in drop]
    with open(args.out, 'w') as f:
        json.dump(coco, f)
    print(f'wrote {args.out}: {len(drop)} image(s) and '
          f'{n_anns - len(coco["annotations"])} annotation(s) left out')
    return 0


if __name__ == '__main__':
    sys.exit(main())
