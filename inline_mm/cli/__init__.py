"""inline_mm's command-line tools, importable and run as console scripts (setup.cfg
``[options.entry_points]``) or ``python -m inline_mm.cli.<tool>``; ``tools/`` holds the checkout's
thin wrappers around them, and the wheel ships those under ``inline_mm/.mim/tools`` for ``mim``.

Importing this package imports nothing: each tool loads what it needs when it runs.
"""
