#!/usr/bin/env python
"""Write a copy of a COCO file without some images.

The checkout's path of the console script ``inline-mm-coco-remove-images``; all of it lives in
:mod:`inline_mm.cli.coco_remove_images`.
"""
import sys

from inline_mm.cli.coco_remove_images import main

if __name__ == '__main__':
    sys.exit(main())
