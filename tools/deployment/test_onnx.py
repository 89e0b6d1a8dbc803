#!/usr/bin/env python
"""Evaluate an exported detector or segmentor with ONNX Runtime on its config's test set
(and compare it with the PyTorch checkpoint).

The checkout's path of the console script ``inline-mm-test-onnx``; all of it lives in
:mod:`inline_mm.cli.test_onnx`.
"""
import sys

from inline_mm.cli.test_onnx import main

if __name__ == '__main__':
    sys.exit(main())
