"""Write small, real datasets for demos and tests (no download needed).

    inline-mm-make-toy-dataset coco   data/toy_coco      # COCO instance segmentation
    inline-mm-make-toy-dataset ade    data/toy_ade       # ADE20K directory layout
    inline-mm-make-toy-dataset cityscapes data/toy_city  # Cityscapes directory layout
    inline-mm-make-toy-dataset folder data/toy_folder    # images/ + masks/ folders
    inline-mm-make-toy-dataset coco-export data/my_coco  # a COCO export with typical defects
    inline-mm-make-toy-dataset labelme data/my_labelme   # a labelme folder

Each kind's options: ``inline-mm-make-toy-dataset KIND --help``.
"""
import argparse
import importlib

#: kind -> module providing ``add_arguments(parser)`` and ``run(args)``
KINDS = {
    'coco': 'inline_mm.datasets.toy.coco',
    'ade': 'inline_mm.datasets.toy.segmentation',
    'cityscapes': 'inline_mm.datasets.toy.segmentation',
    'folder': 'inline_mm.datasets.toy.segmentation',
    'coco-export': 'inline_mm.datasets.toy.exports',
    'labelme': 'inline_mm.datasets.toy.exports',
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    sub = parser.add_subparsers(dest='kind', required=True)
    for kind, module in KINDS.items():
        mod = importlib.import_module(module)
        p = sub.add_parser(kind, help=mod.KIND_HELP[kind])
        p.add_argument('out', help='output directory')
        mod.add_arguments(p, kind)
        p.set_defaults(run=mod.run)
    args = parser.parse_args(argv)
    args.run(args)


if __name__ == '__main__':
    main()
