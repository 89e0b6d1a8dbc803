"""Write a copy of a COCO file without some images and their annotations.

    inline-mm-coco-remove-images data/my_coco/annotations/train_export.json \\
        data/my_coco/annotations/train.json --images train/0007.jpg train/0012.jpg

For images the checker names that cannot be fixed now (a truncated copy, a photo to
annotate again). The input is never changed: the output must be another file. The fixer
(``inline-mm-coco-fix``) does this too (--drop-images, --drop-bad-images), with the
other fixes the checker proposes.
"""
import json
import sys

from inline_mm.cli import doc_parser


def main(argv=None) -> int:
    from inline_mm.cli.coco_fix import check_output_path
    from inline_mm.datasets.coco_checks import CocoCheck
    from inline_mm.datasets.coco_fixes import FixRequest, fix_coco
    p = doc_parser(__doc__)
    p.add_argument('src', help='the COCO json to read')
    p.add_argument('out', help='the json to write (not the input)')
    p.add_argument('--images', nargs='+', required=True, metavar='FILE_NAME',
                   help='file_name values (as in the json) of the images to leave out')
    args = p.parse_args(argv)
    check_output_path(args.src, args.out)
    with open(args.src) as f:
        coco = json.load(f)
    try:
        fixed, _ = fix_coco(coco, CocoCheck(args.src, ''), FixRequest(drop_images=args.images))
    except ValueError as e:
        raise SystemExit(f'error: {args.src}: {e}')
    with open(args.out, 'w') as f:
        json.dump(fixed, f)
    n_images = len(coco['images']) - len(fixed['images'])
    n_anns = len(coco['annotations']) - len(fixed['annotations'])
    print(f'wrote {args.out}: {n_images} image(s) and {n_anns} annotation(s) left out')
    return 0


if __name__ == '__main__':
    sys.exit(main())
