"""Distributed training on CPU processes (gloo) with the stock mmengine Runner.

Three things stop mmengine 0.10.7 (the last release) from training on CPU processes
launched by ``torchrun`` (gloo, no GPU):

* its launcher calls ``torch.cuda.set_device(LOCAL_RANK)`` before creating the
  process group ("Found no NVIDIA driver"), and the configs' ``dist_cfg`` asks for the
  NCCL backend, which is GPU-only;
* it wraps every distributed model as
  ``MMDistributedDataParallel(module, device_ids=[LOCAL_RANK])``, and
  ``DistributedDataParallel`` rejects ``device_ids`` for a CPU module ("device_ids and
  output_device arguments only work with single-device/multiple-device GPU modules");
* it rejects ``SyncBatchNorm`` in a CPU module ("SyncBatchNorm layers only work with
  GPU modules"), and ``SyncBatchNorm.forward`` itself needs GPU tensors in training.

So ``tools/dist_train.sh`` on a machine without GPUs (a laptop, a CI runner) could not
train any config, and none with the SyncBN heads of mmseg's UperNet / FPN bases.
:func:`install` extends mmengine for exactly that case, CUDA unavailable: the process
group is created without ``set_device``, on gloo when NCCL was asked for (logged);
SyncBN layers become ``BatchNorm`` (one warning says so and what it means) and the
model is wrapped without ``device_ids``.  Whenever CUDA is available, mmengine's own
code runs unchanged.

The same holds for fully sharded runs (``runner_type='FlexibleRunner'`` with
``FSDPStrategy``): the strategy passes ``device_id=LOCAL_RANK`` to FSDP, which is a CUDA
device (without one FSDP stops: "FSDP needs a non-CPU accelerator device"), and keeps the
SyncBN layers. On CPU processes the wrapper gets ``device_id=torch.device('cpu')`` and the
SyncBN layers become ``BatchNorm`` as above (``FSDPStrategy._wrap_model``).
"""
import copy
import functools
import logging
import os

import torch.nn as nn

from .patch import BY_ENGINE, Patch, before_fixed_mmengine

__all__ = ['PATCHES', 'install', 'installed', 'sync_bn_layers', 'wrap_cpu_distributed']

SYNC_BN_WARNING = (
    'SyncBatchNorm needs GPU tensors, and this distributed run is on CPU: {n} SyncBN '
    'layer(s) of the model were converted to plain BatchNorm. Their statistics are now '
    'computed per process ({world} processes), not over the global batch; expect '
    'slightly different results than with SyncBN on GPUs, and keep at least 2 images '
    'per process. GPU runs keep SyncBN.')


def sync_bn_layers(model: nn.Module) -> int:
    """Number of SyncBN layers (torch's, and mmcv's when its ops are built) in ``model``."""
    from mmengine.model.utils import mmcv_full_available
    kinds = [nn.SyncBatchNorm]
    if mmcv_full_available():
        from mmcv.ops import SyncBatchNorm as MMCVSyncBN
        kinds.append(MMCVSyncBN)
    return sum(isinstance(m, tuple(kinds)) for m in model.modules())


def wrap_cpu_distributed(runner, model_wrapper_cfg, model: nn.Module) -> nn.Module:
    """What ``Runner.wrap_model`` does for a distributed run, minus what CPUs cannot do.

    Args:
        runner (Runner): The runner (its ``cfg`` and ``logger`` are used).
        model_wrapper_cfg (dict, optional): The config's ``model_wrapper_cfg``; its
            ``type`` defaults to ``'MMDistributedDataParallel'``. Default of the
            config: None.
        model (nn.Module): The model, on CPU.

    Returns:
        nn.Module: The wrapped model, without SyncBN layers.
    """
    from mmengine.model import MMDistributedDataParallel
    from mmengine.registry import MODEL_WRAPPERS

    model = _revert_sync_bn(model, runner.logger)
    if runner.cfg.get('sync_bn', None) is not None:
        runner.logger.warning(f"sync_bn={runner.cfg.sync_bn!r} is ignored: SyncBN cannot "
                              'run on CPU processes')
    if model_wrapper_cfg is None:
        return MMDistributedDataParallel(
            module=model, broadcast_buffers=False,
            find_unused_parameters=runner.cfg.get('find_unused_parameters', False))
    wrapper_cfg = copy.deepcopy(dict(model_wrapper_cfg))
    wrapper_cfg.setdefault('type', 'MMDistributedDataParallel')
    return MODEL_WRAPPERS.build(wrapper_cfg, default_args=dict(module=model))


def _revert_sync_bn(model: nn.Module, logger) -> nn.Module:
    """``model`` with its SyncBN layers made ``BatchNorm`` (warned about once, on rank 0)."""
    from mmengine.dist import get_world_size
    from mmengine.model import revert_sync_batchnorm
    n = sync_bn_layers(model)
    if n:
        model = revert_sync_batchnorm(model)
        # The runner's logger prints on rank 0 only: one warning per run, not per rank.
        logger.warning(SYNC_BN_WARNING.format(n=n, world=get_world_size()))
    return model


def _accelerator_available() -> bool:
    from mmengine.device import (is_cuda_available, is_mlu_available, is_musa_available,
                                 is_npu_available)
    return (is_cuda_available() or is_mlu_available() or is_npu_available()
            or is_musa_available())


def init_cpu_process_group(backend: str = 'gloo', init_backend: str = 'torch', **kwargs):
    """mmengine's ``pytorch`` launcher without ``torch.cuda.set_device``; NCCL (GPU-only)
    becomes gloo.

    Args:
        backend (str): The configured backend. Default: ``'gloo'``.
        init_backend (str): Only ``'torch'`` is supported on CPU. Default: ``'torch'``.
        **kwargs: Passed to ``torch.distributed.init_process_group`` (e.g. ``timeout``).
    """
    import torch.distributed as dist
    from mmengine.logging import print_log
    if init_backend != 'torch':
        raise RuntimeError(f'init_backend={init_backend!r} needs GPUs; on CPU processes use '
                           "the default 'torch'")
    if backend == 'nccl':
        if os.environ.get('RANK', '0') == '0':
            print_log("inline_mm: no GPU here, so the process group uses 'gloo' instead of "
                      "the configured 'nccl'", logger='current', level=logging.INFO)
        backend = 'gloo'
    dist.init_process_group(backend=backend, **kwargs)


def install():
    """Let mmengine launch and wrap distributed runs on CPU processes (idempotent)."""
    import mmengine.dist.utils as dist_utils
    from mmengine.device import get_device
    from mmengine.model import is_model_wrapper
    from mmengine.runner import Runner

    init = dist_utils._init_dist_pytorch
    if not getattr(init, '_inline_mm_cpu_ddp', False):
        @functools.wraps(init)
        def _init_dist_pytorch(backend, init_backend='torch', **kwargs):
            if _accelerator_available():
                return init(backend, init_backend=init_backend, **kwargs)
            return init_cpu_process_group(backend, init_backend=init_backend, **kwargs)

        _init_dist_pytorch._inline_mm_cpu_ddp = True
        dist_utils._init_dist_pytorch = _init_dist_pytorch

    _install_fsdp()
    original = Runner.wrap_model
    if getattr(original, '_inline_mm_cpu_ddp', False):
        return

    @functools.wraps(original)
    def wrap_model(self, model_wrapper_cfg, model):
        if self.distributed and not is_model_wrapper(model) and get_device() == 'cpu':
            self.logger.log(logging.INFO, 'inline_mm: distributed training on CPU processes '
                                          '(DistributedDataParallel without device_ids)')
            return wrap_cpu_distributed(self, model_wrapper_cfg, model.to('cpu'))
        return original(self, model_wrapper_cfg, model)

    wrap_model._inline_mm_cpu_ddp = True
    Runner.wrap_model = wrap_model


def _fsdp_strategy():
    """mmengine's ``FSDPStrategy`` (None in an mmengine without strategies)."""
    try:
        from mmengine._strategy import FSDPStrategy
    except ImportError:
        return None
    return FSDPStrategy


def _install_fsdp():
    strategy = _fsdp_strategy()
    if strategy is None or getattr(strategy._wrap_model, '_inline_mm_cpu_ddp', False):
        return
    original = strategy._wrap_model

    @functools.wraps(original)
    def _wrap_model(self, model):
        from mmengine.model import is_model_wrapper
        if _accelerator_available() or is_model_wrapper(model):
            return original(self, model)
        import torch
        self.logger.info("inline_mm: fully sharded on CPU processes (FSDP with device_id='cpu')")
        model = _revert_sync_bn(model, self.logger)
        self.model_wrapper = dict(self.model_wrapper or dict(type='MMFullyShardedDataParallel'))
        self.model_wrapper['device_id'] = torch.device('cpu')
        return original(self, model)

    _wrap_model._inline_mm_cpu_ddp = True
    strategy._wrap_model = _wrap_model


def installed() -> bool:
    import mmengine.dist.utils as dist_utils
    from mmengine.runner import Runner
    strategy = _fsdp_strategy()
    return (getattr(dist_utils._init_dist_pytorch, '_inline_mm_cpu_ddp', False)
            and getattr(Runner.wrap_model, '_inline_mm_cpu_ddp', False)
            and (strategy is None or getattr(strategy._wrap_model, '_inline_mm_cpu_ddp', False)))


#: the row of the patch table this module switches on (python -m inline_mm.env)
PATCHES = (
    Patch('cpu_distributed', "mmengine's pytorch launcher, Runner.wrap_model and "
          'FSDPStrategy._wrap_model, on machines without an accelerator only',
          'no distributed run on CPU processes: the launcher calls torch.cuda.set_device, DDP '
          'gets device_ids, FSDP a CUDA device_id, SyncBN needs GPUs', 'mmengine < 0.11',
          BY_ENGINE, before_fixed_mmengine('its pytorch launcher calls torch.cuda.set_device'),
          installed, install),
)
