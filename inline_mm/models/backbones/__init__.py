from .inline_cswin import InLineCSwin, convert_cswin_checkpoint
from .inline_deit import InLineDeiT, convert_deit_checkpoint
from .inline_pvt import InLinePVT, convert_pvt_checkpoint
from .inline_swin import InLineSwin, convert_swin_checkpoint

#: backbone class name -> official-to-ours state-dict conversion (pure, idempotent)
CONVERTERS = {'InLineSwin': convert_swin_checkpoint,
              'InLinePVT': convert_pvt_checkpoint,
              'InLineCSwin': convert_cswin_checkpoint,
              'InLineDeiT': convert_deit_checkpoint}

__all__ = ['InLineSwin', 'InLinePVT', 'InLineCSwin', 'InLineDeiT', 'CONVERTERS']
