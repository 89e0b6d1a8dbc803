#!/usr/bin/env python
"""Check a dataset (image/mask folders or a COCO json) before training.

The checkout's path of the console script ``inline-mm-check-dataset``; all of it lives in
:mod:`inline_mm.cli.check_dataset`.
"""
import sys

from inline_mm.cli.check_dataset import main

if __name__ == '__main__':
    sys.exit(main())
