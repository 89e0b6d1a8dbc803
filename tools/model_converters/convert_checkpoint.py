#!/usr/bin/env python
"""Convert an official InLine ImageNet checkpoint into a tensors-only file.

The checkout's path of the console script ``inline-mm-convert-checkpoint``; all of it lives in
:mod:`inline_mm.cli.convert_checkpoint`.
"""
import sys

from inline_mm.cli.convert_checkpoint import main

if __name__ == '__main__':
    sys.exit(main())
