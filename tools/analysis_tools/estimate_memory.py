#!/usr/bin/env python
"""GPU memory a config needs per GPU, in training and inference, counted before the run
(fake tensors: no GPU needed). All of it lives in :mod:`inline_mm.cli.estimate_memory`::

    python tools/analysis_tools/estimate_memory.py CONFIG [--with-cp off on 0,1] [--json]
"""
import sys

from inline_mm.cli.estimate_memory import main

if __name__ == '__main__':
    sys.exit(main())
