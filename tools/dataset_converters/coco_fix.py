#!/usr/bin/env python
"""Write a fixed copy of a COCO instance file (the fixes the checker proposes, on request).

The checkout's path of the console script ``inline-mm-coco-fix``; all of it lives in
:mod:`inline_mm.cli.coco_fix`.
"""
import sys

from inline_mm.cli.coco_fix import main

if __name__ == '__main__':
    sys.exit(main())
