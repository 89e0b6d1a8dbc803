"""The GPU memory a config needs per GPU, known before the run: counted on fake tensors.

A config's model is built on the CPU (random weights, nothing downloaded) and moved to
*fake* CUDA tensors (``torch._subclasses.fake_tensor.FakeTensorMode``): every operation of
the forward runs with its real shapes, dtypes and device (the batched path, as on a GPU;
autocast follows CUDA's rules), but computes nothing and allocates nothing. No GPU is needed.

**Training** (per GPU, one iteration at the config's own input size and batch):

* ``params``: parameters and buffers;
* ``grads``: one gradient per trainable parameter;
* ``optimizer``: the optimiser's state for the config's optimiser type (AdamW: two tensors per
  trainable parameter);
* ``activations``: the bytes autograd keeps for the backward pass, counted with saved-tensor
  hooks (``torch.autograd.graph.saved_tensors_hooks``): every tensor the forward saves, each
  storage once, parameters apart. Under AMP the low-precision copies of the weights that
  autocast caches are saved tensors too, and counted; with ``with_cp`` a checkpointed block
  keeps only its input;
* ``peak``: what a step holds at its worst moment. The backward frees saved tensors while it
  creates gradients, so the peak is the largest, over the saved tensors in the order the
  forward saved them, of what is still saved up to that tensor, the gradients of the
  parameters the forward used after it (already computed), and twice that tensor (the
  gradient arriving at its operation and the one leaving it); at least the gradients plus
  the optimiser's working copy at the update (a multi-tensor update, the default on GPUs,
  copies the largest parameter group once); with ``with_cp``, also what is saved before
  each checkpointed block, the gradients after it and the block's own activations, which
  the backward recomputes there. ``params`` and ``optimizer`` are added to it.

**Inference** (per GPU, the test loop's batch at the size the test pipeline resizes an image
shaped like the training input to): parameters and buffers plus the peak of the tensors alive
during a ``no_grad`` forward (a dispatch-level count of every storage made and freed).

The count covers encoder-decoder segmentors (UperNet, Semantic FPN, SegFormer, ...) through
their own ``loss`` and ``predict``, and two-stage detectors (Mask R-CNN, Cascade Mask R-CNN)
through their backbone, neck and RPN, with the RoI heads run on as many RoIs as the config's
sampler keeps per image in training (``rcnn.sampler.num``, masks on its positive share) and
as the test config keeps at inference (``rpn.max_per_img`` boxes, ``rcnn.max_per_img``
masks): the sizes a real iteration reaches with enough objects. Their RoI extraction is
stood in for by a tensor of its output size (it saves no activations), and the losses of the
detectors' heads (a few MB) are not counted. Heads whose shapes depend on the data throughout
(one-stage and query-based detectors, Mask2Former) are refused with a clear error.

What it does not see: the CUDA caching allocator's rounding and fragmentation, cuDNN/cuBLAS
workspaces and the CUDA context (about 0.3-0.5 GB per process), and temporaries inside a
single kernel. ``python -m benchmarks --memory-check`` compares the count with the CPU
allocator's peak for one real training step; ``tools/dev/gpu/cuda_check.py`` with
``torch.cuda.max_memory_allocated`` on a GPU.
"""
import contextlib
import copy
import re
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn

__all__ = ['PRECISIONS', 'TrainMemory', 'TestMemory', 'MemoryCounter', 'count', 'fake_cuda',
           'cuda_autocast', 'optimizer_bytes', 'GiB']

#: the precisions counted: name -> autocast dtype (None: fp32, no autocast)
PRECISIONS = {'fp32': None, 'fp16': torch.float16, 'bf16': torch.bfloat16}
GiB = 2 ** 30

#: optimiser type -> state tensors per trainable parameter (torch's optimisers, which
#: mmengine builds)
_STATE = {'Adam': 2, 'AdamW': 2, 'Adamax': 2, 'NAdam': 2, 'RAdam': 2, 'Adadelta': 2,
          'Adagrad': 1, 'RMSprop': 1, 'SGD': 1, 'ASGD': 2, 'Rprop': 2}


def optimizer_bytes(optimizer: dict, trainable_bytes: int) -> int:
    """Bytes of optimiser state for ``trainable_bytes`` of trainable parameters under
    ``optimizer`` (a config's ``optim_wrapper.optimizer``)."""
    kind = optimizer.get('type')
    kind = kind if isinstance(kind, str) else getattr(kind, '__name__', str(kind))
    kind = kind.split('.')[-1]
    if kind not in _STATE:
        raise ValueError(f'memory estimate: optimiser type {kind!r} is not one it knows the state '
                         f'of; known: {", ".join(sorted(_STATE))}')
    per_param = _STATE[kind]
    if kind == 'SGD' and not optimizer.get('momentum', 0):
        per_param = 0
    if kind in ('Adam', 'AdamW') and optimizer.get('amsgrad', False):
        per_param = 3
    if kind == 'RMSprop':
        per_param += bool(optimizer.get('momentum', 0)) + bool(optimizer.get('centered', False))
    return per_param * trainable_bytes


@contextlib.contextmanager
def cuda_autocast(dtype: Optional[torch.dtype]):
    """CUDA autocast to ``dtype`` (None: off), also where torch sees no CUDA device (for fake
    CUDA tensors): ``torch.autocast('cuda')`` switches itself off there, so its state is set
    directly, and restored after."""
    if dtype is None:
        yield
        return
    enabled, previous = torch.is_autocast_enabled('cuda'), torch.get_autocast_dtype('cuda')
    torch.set_autocast_enabled('cuda', True)
    torch.set_autocast_dtype('cuda', dtype)
    torch.autocast_increment_nesting()
    try:
        yield
    finally:
        if torch.autocast_decrement_nesting() == 0:
            torch.clear_autocast_cache()
        torch.set_autocast_enabled('cuda', enabled)
        torch.set_autocast_dtype('cuda', previous)


@contextlib.contextmanager
def fake_cuda(model: nn.Module):
    """Move ``model`` (built on the CPU, outside the mode: building inside it trips the
    initialisers) to fake CUDA tensors and enter the fake mode; yields the mode. Tensors made
    inside are fake too; data-dependent sizes (``nonzero``, boolean masks) become symbols."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    mode = FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv())
    with mode:
        model.to('cuda')
        yield mode


def _key(t: torch.Tensor):
    return t.untyped_storage()._cdata


def _nbytes(t: torch.Tensor) -> Optional[int]:
    """Bytes of ``t``'s storage; None when its size depends on data (a symbol)."""
    n = t.untyped_storage().nbytes()
    return n if isinstance(n, int) else None


@dataclass
class TrainMemory:
    """Training memory per GPU, in bytes (see the module docstring)."""
    precision: str
    with_cp: Union[bool, Tuple[int, ...]]
    batch: int
    input_hw: Tuple[int, int]
    params: int
    grads: int
    optimizer: int
    activations: int
    peak: int
    #: saved tensors whose size depends on the data (not counted; small in the heads covered)
    uncounted: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class TestMemory:
    """Inference memory per GPU, in bytes: parameters and buffers plus the peak of the
    tensors alive during one ``no_grad`` forward."""
    precision: str
    batch: int
    input_hw: Tuple[int, int]
    params: int
    peak: int

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class _Record:
    """What one training forward saved: per saved tensor in order, the new storage bytes it
    added and its own bytes if it takes a gradient; per position, the trainable bytes first
    used there; per block, the bytes saved inside it."""
    added: List[int] = field(default_factory=list)
    flowing: List[int] = field(default_factory=list)
    first_use: Dict[int, int] = field(default_factory=dict)
    block_bytes: Dict[str, int] = field(default_factory=dict)
    block_entry: Dict[str, int] = field(default_factory=dict)
    dtypes: set = field(default_factory=set)
    uncounted: int = 0


class _SavedTensors:
    """Saved-tensor hooks and module hooks recording a :class:`_Record`."""

    def __init__(self, model: nn.Module, blocks: Dict[str, nn.Module]):
        self.model = model
        self.blocks = blocks
        self.record = _Record()
        self._known = {_key(t) for t in list(model.parameters()) + list(model.buffers())}
        self._seen = {}
        self._stack: List[str] = []
        self._used = set()
        self._handles = []

    def _pack(self, t: torch.Tensor):
        rec = self.record
        key = _key(t)
        new = 0
        if key not in self._known and key not in self._seen:
            n = _nbytes(t)
            if n is None:
                rec.uncounted += 1
                n = 0
            self._seen[key] = t       # kept alive: the storage is counted once
            new = n
            rec.dtypes.add(t.dtype)
            if self._stack:
                rec.block_bytes[self._stack[-1]] = rec.block_bytes.get(self._stack[-1], 0) + n
        rec.added.append(new)
        size = t.numel() * t.element_size() if t.requires_grad else 0
        rec.flowing.append(size if isinstance(size, int) else 0)
        return t

    def _first_use(self, module, args):
        if id(module) in self._used:
            return
        self._used.add(id(module))
        n = sum(p.numel() * p.element_size() for p in module.parameters(recurse=False)
                if p.requires_grad)
        if n:
            pos = len(self.record.added)
            self.record.first_use[pos] = self.record.first_use.get(pos, 0) + n

    def _enter_block(self, name: str):
        self._stack.append(name)
        self.record.block_entry.setdefault(name, len(self.record.added))

    def _leave_block(self):
        self._stack.pop()

    def __enter__(self):
        for module in self.model.modules():
            if any(True for _ in module.parameters(recurse=False)):
                self._handles.append(module.register_forward_pre_hook(self._first_use))
        for name, block in self.blocks.items():
            self._handles.append(block.register_forward_pre_hook(
                lambda m, a, name=name: self._enter_block(name)))
            self._handles.append(block.register_forward_hook(
                lambda m, a, o: self._leave_block()))
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self._hooks.__exit__(*exc)
        for handle in self._handles:
            handle.remove()
        self._seen.clear()


def _backward_peak(rec: _Record, grads_total: int, redone=()) -> int:
    """The largest working set of the backward (see the module docstring), without the
    parameters and the optimiser state; ``redone``: (position, bytes) of checkpointed blocks,
    whose activations come back while the backward is at their position."""
    n = len(rec.added)
    # gradients already made when the backward reaches position i: parameters first used
    # after i
    after = [0] * (n + 1)
    for pos, size in rec.first_use.items():
        after[min(pos, n)] += size
    for i in range(n - 1, -1, -1):
        after[i] += after[i + 1]
    saved_before = [0] * (n + 1)
    for i in range(n):
        saved_before[i + 1] = saved_before[i] + rec.added[i]
    peak = max(saved_before[i + 1] + after[i + 1] + 2 * rec.flowing[i] for i in range(n)) \
        if n else 0
    for pos, size in redone:
        peak = max(peak, saved_before[pos] + after[pos] + size)
    return max(peak, saved_before[n], grads_total)


class _LiveTensors:
    """A dispatch mode that follows every storage the operations make until it is freed;
    ``peak`` is the largest sum alive at once (pre-existing storages apart)."""

    def __init__(self, known):
        from torch.utils._python_dispatch import TorchDispatchMode

        counter = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                counter._see(out)
                return out

        self.mode = Mode()
        self.known = set(known)
        self.live = {}
        self.total = self.peak = 0

    def _see(self, out):
        from torch.multiprocessing.reductions import StorageWeakRef
        from torch.utils._pytree import tree_leaves
        for ref_key in [k for k, (ref, _) in self.live.items() if ref.expired()]:
            self.total -= self.live.pop(ref_key)[1]
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                key = _key(t)
                if key not in self.known and key not in self.live:
                    n = _nbytes(t) or 0
                    self.live[key] = (StorageWeakRef(t.untyped_storage()), n)
                    self.total += n
        self.peak = max(self.peak, self.total)


# ------------------------------------------------------------------ configs and models
def _scale_pairs(node) -> List[Tuple[int, int]]:
    """Every (long, short) side pair of the resize scales in a pipeline (nested too)."""
    pairs = []
    if isinstance(node, dict):
        for key in ('scale', 'scales', 'img_scale'):
            value = node.get(key)
            items = value if isinstance(value, list) else [value]
            for item in items:
                if isinstance(item, (tuple, list)) and len(item) == 2 and all(
                        isinstance(v, int) for v in item):
                    pairs.append((max(item), min(item)))
        for value in node.values():
            if isinstance(value, (dict, list, tuple)):
                pairs += _scale_pairs(value)
    elif isinstance(node, (list, tuple)):
        for value in node:
            pairs += _scale_pairs(value)
    return pairs


def _round_up(n: int, divisor: int) -> int:
    return -(-n // divisor) * divisor


def _pipeline(loader) -> list:
    dataset = loader.dataset
    while 'pipeline' not in dataset and 'dataset' in dataset:     # dataset wrappers
        dataset = dataset.dataset
    return dataset.get('pipeline') or []


def _model_kind(model: nn.Module, scope: str) -> str:
    name = type(model).__name__
    if scope == 'mmseg':
        head = type(getattr(model, 'decode_head', None)).__name__
        if name in ('EncoderDecoder', 'CascadeEncoderDecoder') and 'Mask' not in head:
            return 'segmentor'
    elif getattr(model, 'with_rpn', False) and type(getattr(model, 'roi_head', None)).__name__ \
            in ('StandardRoIHead', 'CascadeRoIHead'):
        return 'two-stage'
    raise ValueError(
        f'memory estimate: {name} is not covered: it counts encoder-decoder segmentors '
        '(UperNet, Semantic FPN, SegFormer, ...) and two-stage detectors (Mask R-CNN, Cascade '
        'Mask R-CNN); the heads of one-stage and query-based detectors and of Mask2Former '
        'take shapes from the data throughout')


def _largest_group(model: nn.Module, optim_wrapper: dict, trainable: int) -> int:
    """Bytes of the largest parameter group the config's optimiser builds: the working copy
    of a multi-tensor update (torch's default on GPUs) is made group by group (mmengine's
    ``paramwise_cfg`` makes a group per parameter). All trainable bytes when the groups
    cannot be built here."""
    from mmengine.optim import build_optim_wrapper
    cfg = copy.deepcopy(optim_wrapper)
    cfg['type'] = 'OptimWrapper'         # the AMP wrappers refuse to build without a GPU
    for key in ('loss_scale', 'dtype', 'use_fsdp'):
        cfg.pop(key, None)
    try:
        groups = build_optim_wrapper(model, cfg).optimizer.param_groups
    except (KeyError, TypeError, ValueError, AssertionError):
        return trainable     # a constructor that needs more than the model: count them all
    return max((sum(p.numel() * p.element_size() for p in g['params'] if p.requires_grad)
                for g in groups), default=0)


def _blocks(backbone: nn.Module) -> Dict[str, nn.Module]:
    """The backbone's blocks (what ``with_cp`` checkpoints one by one): an InLine backbone's
    by its ``block_key``, another's as its innermost modules with a ``with_cp`` attribute."""
    named = dict(backbone.named_modules())
    key = getattr(type(backbone), 'block_key', None)
    if key:
        pattern = re.compile(key)
        return {n: m for n, m in named.items() if n and pattern.fullmatch(n + '.')}
    holders = {n for n, m in named.items() if n and hasattr(m, 'with_cp')}
    return {n: named[n] for n in holders if not any(h.startswith(n + '.') for h in holders)}


def _set_with_cp(backbone: nn.Module, value):
    from inline_mm.models.base import InLineBackbone
    if isinstance(backbone, InLineBackbone):
        backbone.with_cp = value
        return
    if not isinstance(value, bool):
        raise ValueError(f'memory estimate: {type(backbone).__name__} takes with_cp as a bool, '
                         f'got {value!r}')
    holders = [m for m in backbone.modules() if hasattr(m, 'with_cp')]
    if value and not holders:
        raise ValueError(f'memory estimate: {type(backbone).__name__} has no with_cp')
    for m in holders:
        m.with_cp = value


class MemoryCounter:
    """Counts the training and inference memory of one config (see the module docstring).

    The model is built once (on the CPU, then moved to fake CUDA tensors); each call to
    :meth:`train` or :meth:`test` is one fake forward, seconds at detection sizes.

    Args:
        config (str): An mmdet or mmseg config file.
        cfg_options (dict, optional): Overrides, as ``--cfg-options`` gives them.
        shape (tuple, optional): Training input ``(H, W)``. Default: the config's crop
            (segmentors) or the largest image its training pipeline makes, padded as its
            data preprocessor pads (detectors).
        batch (int, optional): Images per GPU in training. Default: the config's
            ``train_dataloader.batch_size``.
    """

    def __init__(self, config: str, cfg_options: Optional[dict] = None,
                 shape: Optional[Tuple[int, int]] = None, batch: Optional[int] = None):
        from ..apis import init_model, read_config
        cfg = read_config(config, cfg_options)
        self.config, self.cfg, self.scope = config, cfg, cfg.get('default_scope')
        model = init_model(copy.deepcopy(cfg), seed=0)
        self.kind = _model_kind(model, self.scope)
        self.blocks = _blocks(model.backbone)
        self.params = sum(t.numel() * t.element_size()
                          for t in list(model.parameters()) + list(model.buffers()))
        self.trainable = sum(p.numel() * p.element_size() for p in model.parameters()
                             if p.requires_grad)
        self.optimizer = optimizer_bytes(cfg.optim_wrapper.optimizer, self.trainable)
        self.update_copy = _largest_group(model, cfg.optim_wrapper, self.trainable)
        self.batch = int(batch or cfg.train_dataloader.batch_size)
        self.input_hw = tuple(shape) if shape else self._train_shape()
        if len(self.input_hw) != 2 or min(self.input_hw) < 32:
            raise ValueError(f'memory estimate: input {self.input_hw} must be (H, W), >= 32')
        self.model = model
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(fake_cuda(model))
        self._no_cp = {}

    def close(self):
        """Leave the fake mode (the model stays on fake tensors: build a new counter)."""
        self._stack.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -------------------------------------------------------------- input sizes
    def _train_shape(self) -> Tuple[int, int]:
        prep = self.cfg.model.get('data_preprocessor', {})
        if self.kind == 'segmentor':
            if prep.get('size'):
                return tuple(prep['size'])
            crops = [t['crop_size'] for t in _pipeline(self.cfg.train_dataloader)
                     if t.get('type') == 'RandomCrop']
            if crops:
                return tuple(crops[0])
        pairs = _scale_pairs(_pipeline(self.cfg.train_dataloader))
        if not pairs:
            raise ValueError(f'memory estimate: no resize scale in the training pipeline of '
                             f'{self.config}; give the input size (--shape H W)')
        long, short = max(pairs, key=lambda p: p[0] * p[1])
        divisor = prep.get('pad_size_divisor', 1) or 1
        return _round_up(short, divisor), _round_up(long, divisor)

    def test_shape(self) -> Tuple[int, int]:
        """The test pipeline's resize of an image shaped like the training input (the
        training input when the pipeline has no resize), padded as the model pads."""
        h, w = self.input_hw
        pairs = _scale_pairs(_pipeline(self.cfg.test_dataloader))
        if pairs:
            long, short = pairs[0]
            factor = min(long / max(h, w), short / min(h, w))
            h, w = round(h * factor), round(w * factor)
        divisor = self.cfg.model.get('data_preprocessor', {}).get('pad_size_divisor', 1) or 1
        return _round_up(h, divisor), _round_up(w, divisor)

    # -------------------------------------------------------------- forwards
    def _segmentor_samples(self, b: int, hw, labels: bool):
        from mmengine.structures import PixelData
        from mmseg.structures import SegDataSample
        samples = []
        for _ in range(b):
            s = SegDataSample()
            if labels:
                s.gt_sem_seg = PixelData(data=torch.zeros(1, *hw, dtype=torch.long,
                                                          device='cuda'))
            s.set_metainfo(dict(img_shape=hw, ori_shape=hw, pad_shape=hw,
                                padding_size=[0, 0, 0, 0]))
            samples.append(s)
        return samples

    def _rcnn(self, train: bool):
        """Per stage: (box head, RoIs, mask head, mask RoIs) for the batch (see the module
        docstring for the numbers)."""
        roi, cfg = self.model.roi_head, self.cfg.model
        cascade = type(roi).__name__ == 'CascadeRoIHead'
        stages = range(roi.num_stages) if cascade else [None]
        b = self.batch if train else self._test_batch()
        out = []
        for s in stages:
            def pick(x):
                return x[s] if s is not None else x
            if train:
                sampler = pick(cfg.train_cfg.rcnn).sampler
                rois = sampler.num
                masks = int(sampler.num * sampler.pos_fraction)
            else:
                rois, masks = cfg.test_cfg.rpn.max_per_img, cfg.test_cfg.rcnn.max_per_img
            mask_head = pick(roi.mask_head) if roi.with_mask else None
            mask_extractor = pick(roi.mask_roi_extractor) if roi.with_mask else None
            out.append((pick(roi.bbox_roi_extractor), pick(roi.bbox_head), b * rois,
                        mask_extractor, mask_head, b * masks))
        return out

    @staticmethod
    def _roi_feats(feats, extractor, n: int):
        """A stand-in for RoI extraction: its output's size and dtype, in the graph of the
        feature maps (RoIAlign saves no activations; its level assignment reads the data)."""
        size = extractor.roi_layers[0].output_size
        size = tuple(size) if isinstance(size, (tuple, list)) else (size, size)
        anchor = sum(f.reshape(-1)[:1].sum() for f in feats[:extractor.num_inputs]) * 0
        return feats[0].new_zeros(n, extractor.out_channels, *size) + anchor

    def _forward(self, train: bool, b: int, hw) -> list:
        x = torch.randn(b, 3, *hw, device='cuda')
        model = self.model
        if self.kind == 'segmentor':
            if train:
                return [model.loss(x, self._segmentor_samples(b, hw, True))]
            return [model.predict(x, self._segmentor_samples(b, hw, False))]
        feats = model.extract_feat(x)
        outs = [feats, model.rpn_head(feats)]
        if not train:
            outs.pop()      # the RPN's maps are freed once its proposals are made
        for box_ext, box_head, rois, mask_ext, mask_head, masks in self._rcnn(train):
            outs.append(box_head(self._roi_feats(feats, box_ext, rois)))
            if mask_head is not None:
                outs.append(mask_head(self._roi_feats(feats, mask_ext, masks)))
        return outs

    def _test_batch(self) -> int:
        return int(self.cfg.test_dataloader.get('batch_size', 1) or 1)

    # -------------------------------------------------------------- counts
    def _record(self, precision: str, with_cp) -> _Record:
        if precision not in PRECISIONS:
            raise ValueError(f'precision must be one of {", ".join(PRECISIONS)}, got '
                             f'{precision!r}')
        _set_with_cp(self.model.backbone, with_cp)
        self.model.train()
        recorder = _SavedTensors(self.model, self.blocks)
        with cuda_autocast(PRECISIONS[precision]), recorder:
            outs = self._forward(True, self.batch, self.input_hw)
        del outs
        rec = recorder.record
        low = PRECISIONS[precision]
        if low is not None and low not in rec.dtypes:
            raise RuntimeError(f'memory estimate: {precision} autocast did not take effect (no '
                               f'saved tensor is {low}); this torch may handle autocast '
                               'differently')
        return rec

    def train(self, precision: str = 'fp32', with_cp=False) -> TrainMemory:
        """Training memory per GPU at ``precision`` ('fp32', 'fp16' or 'bf16' AMP) with the
        backbone's ``with_cp`` set to ``with_cp`` (bool, or stage indices for an InLine
        backbone)."""
        rec = self._record(precision, with_cp)
        redone = []
        if with_cp is not False:
            base = self._no_cp.get(precision) or self._record(precision, False)
            self._no_cp[precision] = base
            # blocks whose saves vanished are checkpointed: each recomputes its activations
            # when the backward reaches it
            redone = [(rec.block_entry[n], size) for n, size in base.block_bytes.items()
                      if size and not rec.block_bytes.get(n) and n in rec.block_entry]
        else:
            self._no_cp[precision] = rec
        step = self.trainable + self.update_copy     # gradients + the update's working copy
        peak = self.params + self.optimizer + max(_backward_peak(rec, self.trainable, redone),
                                                  step)
        return TrainMemory(
            precision=precision, with_cp=self._cp_value(), batch=self.batch,
            input_hw=tuple(self.input_hw), params=self.params, grads=self.trainable,
            optimizer=self.optimizer, activations=sum(rec.added), peak=peak,
            uncounted=rec.uncounted)

    def _cp_value(self):
        value = getattr(self.model.backbone, 'with_cp', None)
        if value is None:
            value = any(getattr(m, 'with_cp', False) for m in self.model.backbone.modules())
        return value

    def test(self, precision: str = 'fp32') -> TestMemory:
        """Inference memory per GPU at ``precision`` (fp32, or fp16/bf16 autocast)."""
        if precision not in PRECISIONS:
            raise ValueError(f'precision must be one of {", ".join(PRECISIONS)}, got '
                             f'{precision!r}')
        self.model.eval()
        known = {_key(t) for t in list(self.model.parameters()) + list(self.model.buffers())}
        live = _LiveTensors(known)
        b, hw = self._test_batch(), self.test_shape()
        with torch.no_grad(), cuda_autocast(PRECISIONS[precision]), live.mode:
            outs = self._forward(False, b, hw)
        del outs
        return TestMemory(precision=precision, batch=b, input_hw=tuple(hw), params=self.params,
                          peak=self.params + live.peak)


def count(config: str, precisions: Sequence[str] = ('fp32',), with_cp: Sequence = (False,),
          cfg_options: Optional[dict] = None, shape=None, batch=None,
          inference: bool = True) -> dict:
    """Every (precision, with_cp) training count and every precision's inference count of
    ``config``: ``dict(config, kind, params, train=[TrainMemory...], test=[TestMemory...])``."""
    with MemoryCounter(config, cfg_options, shape, batch) as counter:
        train = [counter.train(p, cp) for cp in with_cp for p in precisions]
        test = [counter.test(p) for p in precisions] if inference else []
        return dict(config=config, kind=counter.kind, params=counter.params, train=train,
                    test=test)
