from .inline_swin import InLineSwin, convert_swin_checkpoint

#: backbone class name -> official-to-ours state-dict conversion (pure, idempotent)
CONVERTERS = {'InLineSwin': convert_swin_checkpoint}

__all__ = ['InLineSwin', 'CONVERTERS']
