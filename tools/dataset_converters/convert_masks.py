#!/usr/bin/env python
"""Turn colour masks into class-index masks.

The checkout's path of the console script ``inline-mm-convert-masks``; all of it lives in
:mod:`inline_mm.cli.convert_masks`.
"""
import sys

from inline_mm.cli.convert_masks import main

if __name__ == '__main__':
    sys.exit(main())
