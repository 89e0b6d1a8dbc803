"""Importing this module switches on inline_mm's mmengine behaviours (see
:func:`inline_mm.engine.install`). Configs do it with::

    custom_imports = dict(imports=['inline_mm', 'inline_mm.engine.enable'],
                          allow_failed_imports=False)
"""
from . import install

install()
