#!/usr/bin/env python
"""Write small, real datasets for demos and tests.

The checkout's path of the console script ``inline-mm-make-toy-dataset``; all of it lives in
:mod:`inline_mm.cli.make_toy_dataset`.
"""
import sys

from inline_mm.cli.make_toy_dataset import main

if __name__ == '__main__':
    sys.exit(main())
