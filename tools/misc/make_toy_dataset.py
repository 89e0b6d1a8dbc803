#!/usr/bin/env python
"""Write small, real datasets for demos and tests (no download needed).

    python tools/misc/make_toy_dataset.py coco   data/toy_coco      # COCO instance segmentation
    python tools/misc/make_toy_dataset.py ade    data/toy_ade       # ADE20K directory layout
    python tools/misc/make_toy_dataset.py folder data/toy_folder    # images/ + masks/ folders

Each kind's options: ``python tools/misc/make_toy_dataset.py KIND --help``.
"""
import argparse
import importlib

#: kind -> module providing ``add_arguments(parser)`` and ``run(args)``
KINDS = {
    'coco': 'inline_mm.toydata.coco',
    'ade': 'inline_mm.toydata.segmentation',
    'folder': 'inline_mm.toydata.segmentation',
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
