"""inline_mm's command-line tools, importable and run as console scripts (setup.cfg
``[options.entry_points]``) or ``python -m inline_mm.cli.<tool>``; ``tools/`` holds the checkout's
thin wrappers around them, and the wheel ships those under ``inline_mm/.mim/tools`` for ``mim``.

Importing this package imports nothing: each tool loads what it needs when it runs.
"""


def doc_parser(doc: str, skip: int = 1):
    """An ``argparse`` parser for a tool whose module docstring is ``doc``: the first
    paragraph describes it, and --help ends with the docstring after its first ``skip``
    paragraphs, line breaks kept."""
    import argparse
    return argparse.ArgumentParser(description=doc.split('\n\n')[0],
                                   formatter_class=argparse.RawDescriptionHelpFormatter,
                                   epilog=doc.split('\n\n', skip)[skip])
