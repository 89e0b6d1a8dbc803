#!/usr/bin/env python
"""List a folder of images as a COCO file, for predictions.

The checkout's path of the console script ``inline-mm-images2coco``; all of it lives in
:mod:`inline_mm.cli.images2coco`.
"""
import sys

from inline_mm.cli.images2coco import main

if __name__ == '__main__':
    sys.exit(main())
