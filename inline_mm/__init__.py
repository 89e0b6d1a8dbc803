"""InLine attention backbones for mmdetection 3.x and mmsegmentation 1.x.

``import inline_mm`` registers, makes one change to torch, and does nothing else:

- the backbones of :data:`inline_mm.models.FAMILIES` (``InLineSwin``, ``InLinePVT``,
  ``InLineCSwin``, ``InLineDeiT``) in mmdet's and mmseg's ``MODELS`` (whichever is
  installed), and ViTDet's ``SimpleFPN`` neck with its ``LN2d`` in mmdet's;
- ``SegFolderDataset``, ``PaletteIoUMetric`` and the pipeline checks ``CheckSegMapSize``,
  ``CheckSegLabels``, ``CheckImageSize`` in mmseg's registries (with mmseg),
  and the opt-in ``NonFiniteCheckHook`` / ``DatasetCheckHook``;
- :func:`inline_mm.models.weights.resolve` as the backbones' checkpoint locator, so that
  ``init_cfg`` takes URLs and official names (``'inline://swin_t'``); nothing is
  downloaded or created until a checkpoint is loaded;
- the one change: mmengine's own checkpoint types on torch's ``weights_only`` allowlist
  (:mod:`inline_mm.patches.mmengine_checkpoints`), so that every loader of mmengine checkpoints
  works on torch >= 2.6 without switching safe loading off;
- the module paths of 0.1.x that moved (:data:`inline_mm.version.MOVED_MODULES`) answered, with
  a ``FutureWarning`` naming the new one, by a finder on ``sys.meta_path``
  (:class:`inline_mm.version.MovedPathFinder`; it answers those names only).

Without mmengine (a timm-only install, see :mod:`inline_mm.timm`) it imports the
backbones and registers nothing.

Every change to another package is a row of the patch table (:func:`inline_mm.patches.table`);
the ones that replace mmengine code (CPU DDP, checkpoint pruning and resume fallback,
empty-dataset messages; :data:`inline_mm.engine.PATCHES`, each in its module of
:mod:`inline_mm.patches`) are switched on by :func:`inline_mm.engine.install`: the project's
tools call it, and configs list ``'inline_mm.engine.enable'`` next to ``'inline_mm'`` in
``custom_imports``.
"""
from .version import __version__, install_finder

install_finder()    # before anything else: a moved path imported by a module below still works

from .patches import mmengine_checkpoints  # noqa: E402
from .models import FAMILIES, InLineCSwin, InLineDeiT, InLinePVT, InLineSwin  # noqa: E402
from .models.checkpoint import set_locator  # noqa: E402


def _locate_weights(reference: str) -> str:
    # imported on first use: nothing of the weights' cache or network before a checkpoint loads
    from .models.weights import resolve
    return resolve(reference)


# init_cfg checkpoints may be URLs and official names ('inline://swin_t'): the backbones'
# loader asks inline_mm.models.weights for the local file.
set_locator(_locate_weights)


def _have_mmengine() -> bool:
    try:
        import mmengine  # noqa: F401
    except ModuleNotFoundError as e:
        if e.name is None or e.name.split('.')[0] != 'mmengine':
            raise
        return False
    return True


def _require_mmcv():
    """mmdet or mmseg installed without any importable mmcv: say what to install.

    Upstream mmdet 3.3 / mmseg 1.2 import mmcv in their ``__init__``, so registering the
    backbones already reports it (``models.registry``); onedl-mmdetection 3.5 and
    onedl-mmsegmentation 1.4 do not, and the first mmcv import would be one of ours.
    """
    import importlib.util
    try:
        import mmcv  # noqa: F401
    except ModuleNotFoundError as e:
        if (e.name or '').split('.')[0] != 'mmcv':
            raise
        from .models.registry import MMCV_HINT
        for framework in ('mmdet', 'mmseg'):
            if importlib.util.find_spec(framework) is not None:
                raise ImportError(
                    f'{framework} is installed but mmcv is not importable ({e}). {MMCV_HINT} '
                    'On the onedl stack: `MMCV_WITH_OPS=0 pip install onedl-mmcv==2.3.6` '
                    '(`INLINE_MM_STACK=onedl make setup` does it).') from e


# Without mmengine (a timm-only install: ``inline_mm.timm``) there is nothing to
# register into and no mmengine checkpoint to allow; the backbones still import.
if _have_mmengine():
    _require_mmcv()
    from . import datasets  # noqa: F401,E402  (registers SegFolderDataset, PaletteIoUMetric)
    from .models import detection  # noqa: F401,E402  (registers SimpleFPN, LN2d, PadAwareRPNHead)
    from . import engine  # noqa: F401,E402  (registers the opt-in hooks; patches nothing)

    mmengine_checkpoints.allow_mmengine_checkpoints()

__all__ = ['__version__', 'FAMILIES', 'InLineSwin', 'InLinePVT', 'InLineCSwin', 'InLineDeiT']
