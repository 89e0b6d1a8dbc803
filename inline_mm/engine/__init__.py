"""Reliability of training runs with the stock mmengine Runner.

``import inline_mm`` imports this package, which

* registers :class:`NonFiniteCheckHook` and :class:`DatasetCheckHook` (mmengine
  ``HOOKS``, so ``custom_hooks`` of mmdet and mmseg configs find them) and the
  ``CheckSegMapSize`` pipeline step (mmseg ``TRANSFORMS``); all three are off unless
  a config asks for them;
* extends three mmengine 0.10.7 code paths, each only where mmengine fails, so that
  nothing changes for runs that work today:

  - ``Runner.wrap_model``: distributed runs on CPU processes (gloo) get
    ``DistributedDataParallel`` without ``device_ids`` and plain BatchNorm in place of
    SyncBN, with one warning (:mod:`.distributed`);
  - ``CheckpointHook`` deletes outdated checkpoints only after the new one is
    written, and ``--resume`` skips a missing or incomplete latest checkpoint
    (:mod:`.checkpointing`);
  - ``Runner.build_dataloader`` says why a dataset came out empty (:mod:`.data_checks`).

Nothing here imports mmdet/mmseg models or mmcv's compiled ops.
"""
from . import checkpointing, data_checks, distributed
from .data_checks import CheckSegMapSize, DatasetCheckHook, check_coco
from .nonfinite import NonFiniteCheckHook, NonFiniteLossError

__all__ = ['NonFiniteCheckHook', 'NonFiniteLossError', 'DatasetCheckHook', 'CheckSegMapSize',
           'check_coco']

distributed.install()
checkpointing.install()
data_checks.install()
