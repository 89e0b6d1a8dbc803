#!/usr/bin/env python
"""Export an InLine backbone to ONNX and check it with ONNX Runtime.

The checkout's path of the console script ``inline-mm-export-onnx``; all of it lives in
:mod:`inline_mm.cli.export_onnx`.
"""
import sys

from inline_mm.cli.export_onnx import main

if __name__ == '__main__':
    sys.exit(main())
