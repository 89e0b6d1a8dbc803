#!/usr/bin/env python
"""Evaluate a checkpoint with the stock mmdet/mmseg ``test.py`` (picked by the config's
``default_scope``)::

    python tools/test.py CONFIG CHECKPOINT [--out results.pkl] [--show-dir vis/]
"""
from inline_mm.cli.launch import run

if __name__ == '__main__':
    run('test')
