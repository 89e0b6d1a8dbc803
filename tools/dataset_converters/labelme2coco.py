#!/usr/bin/env python
"""Convert a labelme folder into COCO instance files, split train/val.

The checkout's path of the console script ``inline-mm-labelme2coco``; all of it lives in
:mod:`inline_mm.cli.labelme2coco`.
"""
import sys

from inline_mm.cli.labelme2coco import main

if __name__ == '__main__':
    sys.exit(main())
