"""Write a fixed copy of a COCO instance file: the fixes the checker proposes, on request.

    inline-mm-coco-fix data/my_coco/annotations/train_export.json \\
        data/my_coco/annotations/train.json --fix-sizes --turn-annotations \\
        --drop-bad-images --drop-bad-annotations

It checks the input as ``tools/misc/check_dataset.py`` does (images under the json's
``../images``, or --img-dir), applies the fixes asked for, prints one line per change,
writes the output (never the input: the export stays as it was) and checks the output;
the exit status is 0 when the output passes the check (warnings apart), 1 otherwise.

Fixes (each applies where the checker found it, unless images or ids are named):
  --fix-sizes [FILE ...]        width/height := the size training loads, for images whose
                                annotations fit it (exif-rotation: annotated on the turned
                                photo; image-size: the json's size was wrong)
  --turn-annotations [FILE ...] move the annotations as OpenCV turns the photo (polygons,
                                boxes, RLE masks) and set width/height, for photos annotated
                                on their stored pixels (exif-rotation, exif-orientation)
  --drop-bad-images             leave out images whose file is missing or does not decode
  --drop-images FILE ...        leave out these images (file_name as in the json)
  --drop-bad-annotations        leave out every annotation with a problem: undeclared
                                category, degenerate polygon, RLE of another size, empty
                                box or box wholly outside, no mask (Mask R-CNN), no bbox
  --drop-annotations ID ...     leave out these annotations
  --clip-boxes                  clip boxes that reach outside their image (box-partly-outside)
  --drop-unused-categories      leave out categories no annotation uses (class labels follow
                                the list, so val.json must then get the same list:
                                --categories-from the fixed train.json)
  --categories-from FILE        the categories of FILE (the fixed train.json), in its order;
                                annotations of other categories are left out

Annotation fixes are decided after the image fixes: an RLE "of another size" on a photo
whose width/height were wrong is kept once they are set.
"""
import json
import os
import os.path as osp
import sys

from inline_mm.cli import doc_parser


def parse_args(argv=None):
    p = doc_parser(__doc__, skip=3)
    p.add_argument('src', help='the COCO json to read (the export)')
    p.add_argument('out', help='the json to write (not the input; not an existing file)')
    p.add_argument('--img-dir', help="the folder file_name is relative to (default: the "
                                     "input's ../images)")
    p.add_argument('--task', choices=('instance', 'detection'), default='instance',
                   help='instance (masks needed, the default) or detection (box-only)')
    p.add_argument('--quick', action='store_true',
                   help='read image headers only (sizes and EXIF are still checked; truncated '
                        'or corrupt files are not found)')
    p.add_argument('--jobs', type=int, default=None,
                   help='threads that decode the images (default: one per CPU)')
    g = p.add_argument_group('fixes')
    g.add_argument('--fix-sizes', nargs='*', metavar='FILE', default=None)
    g.add_argument('--turn-annotations', nargs='*', metavar='FILE', default=None)
    g.add_argument('--drop-bad-images', action='store_true')
    g.add_argument('--drop-images', nargs='+', metavar='FILE', default=[])
    g.add_argument('--drop-bad-annotations', action='store_true')
    g.add_argument('--drop-annotations', nargs='+', type=int, metavar='ID', default=[])
    g.add_argument('--clip-boxes', action='store_true')
    g.add_argument('--drop-unused-categories', action='store_true')
    g.add_argument('--categories-from', metavar='FILE')
    args = p.parse_args(argv)
    if args.categories_from and args.drop_unused_categories:
        p.error('--categories-from sets the categories; give it or --drop-unused-categories')
    return args


def main(argv=None) -> int:
    from inline_mm.cli.check_dataset import Report, check_coco_files
    from inline_mm.datasets.coco_checks import check_coco_instances, default_img_dir
    from inline_mm.datasets.coco_fixes import FixRequest, fix_coco
    from inline_mm.datasets.dataset_files import default_jobs
    args = parse_args(argv)
    check_output_path(args.src, args.out)
    categories = None
    if args.categories_from:
        with open(args.categories_from) as f:
            categories = json.load(f).get('categories')
        if not categories:
            raise SystemExit(f'error: {args.categories_from} has no "categories"')
    request = FixRequest(
        sizes=args.fix_sizes, turn=args.turn_annotations, drop_images=args.drop_images,
        drop_bad_images=args.drop_bad_images, drop_annotations=args.drop_annotations,
        drop_bad_annotations=args.drop_bad_annotations, clip_boxes=args.clip_boxes,
        drop_unused_categories=args.drop_unused_categories, categories_from=categories)
    if not request.any():
        raise SystemExit('error: no fix asked for (see --help; the checker names the options '
                         'its findings need)')
    img_dir = args.img_dir or default_img_dir(args.src)
    jobs = args.jobs or default_jobs()
    found = check_coco_instances(args.src, img_dir, decode=not args.quick, task=args.task,
                                 jobs=jobs)
    if any(p.code == 'coco-json' for p in found.problems) and not found.categories:
        raise SystemExit(f'error: {args.src}: ' + '; '.join(p.message for p in found.problems))
    with open(args.src) as f:
        coco = json.load(f)
    try:
        fixed, changes = fix_coco(coco, found, request, args.task)
    except ValueError as e:
        raise SystemExit(f'error: {e}')
    for line in changes:
        print(f'fixed   {line}')
    os.makedirs(osp.dirname(osp.abspath(args.out)), exist_ok=True)
    with open(args.out, 'w') as f:
        json.dump(fixed, f)
    print(f'wrote {args.out}: {len(changes)} change(s); {len(fixed["images"])} images, '
          f'{len(fixed["annotations"])} annotations, {len(fixed["categories"])} categories. '
          'Its check (what only decoding finds is taken from the check above):')
    # What only a full decode finds stays found for the images that are still listed.
    kept = {osp.join(img_dir, im['file_name']) for im in fixed['images']}
    report = Report('')
    check_coco_files([(args.out, img_dir, args.task)], report, False, jobs, False)
    report.add([p for p in found.problems if p.code in ('truncated', 'corrupt')
                and p.path in kept])
    if default_img_dir(args.out) != osp.normpath(img_dir):
        print(f'note: {args.out} is not next to the images folder; check it with '
              f'--img-dir {img_dir}')
    return report.verdict(f'{args.out}: the json rules and the image headers', 1, None,
                          'Fix these in the annotation tool, or leave them out '
                          '(--drop-images, --drop-annotations), and run the fix again.',
                          f'OK: {osp.basename(args.out)} passes the check')


def check_output_path(src: str, out: str):
    """Refuse to write over the input or an existing file (SystemExit naming it)."""
    if osp.exists(out) and osp.exists(src) and osp.samefile(src, out):
        raise SystemExit('error: write the result to another file (the input is kept as is)')
    if osp.exists(out):
        raise SystemExit(f'error: {out} exists; remove it or write another file')


if __name__ == '__main__':
    sys.exit(main())
