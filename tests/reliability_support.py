"""Support for tests/test_reliability_*.py: test configs, training subprocesses and
fault-injection probes.

The probe hooks below are registered when a training process imports this module
(``custom_imports`` of a generated test config, with ``tests/`` on PYTHONPATH); they
stop a real ``tools/train.py`` run at a chosen point so that a test can kill it there.
"""
import json
import os
import os.path as osp
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from mmengine.hooks import Hook
from mmengine.registry import HOOKS
from support import ROOT, TESTS, free_port, subprocess_env, write_tiny_config
PY = sys.executable
SHIPPED = {
    'upernet': ROOT / 'configs/inline_swin' /
    'inline-swin-t-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py',
    'upernet_amp': ROOT / 'configs/inline_swin' /
    'inline-swin-t-in1k-pre_upernet_8xb2-amp-160k_ade20k-512x512.py',
    'upernet_bf16': ROOT / 'configs/inline_swin' /
    'inline-swin-t-in1k-pre_upernet_8xb2-amp-bf16-160k_ade20k-512x512.py',
    'mask_rcnn': ROOT / 'configs/inline_swin/mask-rcnn_inline-swin-t_fpn_1x_coco.py',
    'mask_rcnn_amp': ROOT / 'configs/inline_swin/mask-rcnn_inline-swin-t_fpn_amp-1x_coco.py',
}
BODIES = {
    'upernet': TESTS / 'configs/tiny_upernet_inline-swin.py',
    'mask_rcnn': TESTS / 'configs/tiny_mask-rcnn_inline-swin.py',
}
#: a child of the tiny Mask R-CNN config with every random draw on (``tiny_config``'s ``extra``)
DRAWS = TESTS / 'configs/tiny_mask-rcnn_inline-swin_draws.py'
#: a training subprocess that takes longer than this is stuck
TIMEOUT = 300


# ------------------------------------------------------------------ configs
def write_config(path: Path, base, body: str = '', probes: bool = False) -> Path:
    """Write a config at ``path`` inheriting ``base`` (a path or list of paths) with
    ``body`` as its content; ``probes`` adds this module to ``custom_imports``."""
    bases = [str(b) for b in (base if isinstance(base, (list, tuple)) else [base])]
    lines = [f'_base_ = {bases!r}']
    if probes:
        lines.append("custom_imports = dict(imports=['inline_mm', 'inline_mm.engine.enable', "
                     "'reliability_support'], allow_failed_imports=False)")
    path.write_text('\n'.join(lines) + '\n' + body)
    return path


def tiny_config(tmp: Path, shipped: str, body: str = 'upernet', extra: str = '',
                name: str = 'tiny', probes: bool = False) -> Path:
    """A shipped config, its model shrunk (support.write_tiny_config), with the training
    settings of a body in tests/configs; ``extra`` goes in a child config (a second
    assignment in one file would replace, not merge)."""
    shrunk = write_tiny_config(SHIPPED[shipped], tmp / f'{name}_shrunk.py')
    tiny = write_config(tmp / f'{name}_base.py', shrunk, BODIES[body].read_text())
    return write_config(tmp / f'{name}.py', tiny, extra, probes=probes)


def hook_checked_runner(tmp: Path, data_root: Path):
    """The tiny UperNet run on ``data_root`` with ``DatasetCheckHook`` on, not started."""
    from mmengine.config import Config
    from mmengine.runner import Runner
    cfg = Config.fromfile(str(tiny_config(
        tmp, 'upernet', extra="custom_hooks = [dict(type='DatasetCheckHook')]\n")))
    cfg.work_dir = str(tmp / 'work')
    cfg.train_dataloader.dataset.data_root = str(data_root)
    return Runner.from_cfg(cfg)


# ------------------------------------------------------------------ processes
def env() -> Dict[str, str]:
    """A training run's environment: tests/ importable (the probes), one process alone."""
    e = subprocess_env(PYTHONHASHSEED='0')
    e['PYTHONPATH'] = os.pathsep.join([str(TESTS), e['PYTHONPATH']])
    e.pop('RANK', None)
    e.pop('WORLD_SIZE', None)
    e.pop('LOCAL_RANK', None)
    return e


def train_cmd(config: Path, work_dir: Path, options: Sequence[str] = (), nproc: int = 1,
              resume: bool = False) -> List[str]:
    """``tools/train.py``, or ``tools/dist_train.sh`` (torchrun) with ``nproc`` processes."""
    args = ['--work-dir', str(work_dir)]
    if resume:
        args.append('--resume')
    if options:
        args += ['--cfg-options', *options]
    if nproc == 1:
        return [PY, str(ROOT / 'tools/train.py'), str(config), *args]
    return ['env', f'PORT={free_port()}', f'PYTHON={PY}', 'bash',
            str(ROOT / 'tools/dist_train.sh'), str(config), str(nproc), *args]


def run(cmd: List[str], log: Path, expect_ok: bool = True,
        timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    """Run to completion; stdout+stderr go to ``log`` (and into the assertion message)."""
    with open(log, 'w') as f:
        proc = subprocess.run(cmd, cwd=ROOT, env=env(), stdout=f, stderr=subprocess.STDOUT,
                              timeout=timeout)
    text = log.read_text()
    if expect_ok:
        assert proc.returncode == 0, f'{" ".join(cmd)} failed ({proc.returncode}):\n{text[-6000:]}'
    else:
        assert proc.returncode != 0, f'{" ".join(cmd)} did not fail:\n{text[-6000:]}'
    return proc


def run_until_then_kill(cmd: List[str], log: Path, marker: Path) -> str:
    """Start a run, wait until it writes ``marker`` (a probe), SIGKILL it, return its log."""
    with open(log, 'w') as f:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env(), stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True)
        deadline = time.time() + TIMEOUT
        while not marker.exists():
            if proc.poll() is not None:
                raise AssertionError(f'run ended before the kill point:\n{log.read_text()[-6000:]}')
            if time.time() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                raise AssertionError('run never reached the kill point:\n'
                                     + log.read_text()[-6000:])
            time.sleep(0.1)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    return log.read_text()


# ------------------------------------------------------------------ results
def assert_same_run(a: dict, b: dict):
    """Two checkpoints hold bit-equal weights and optimizer state."""
    assert a['meta']['iter'] == b['meta']['iter']
    assert a['state_dict'].keys() == b['state_dict'].keys()
    differ = [k for k in a['state_dict'] if not torch_equal(a['state_dict'][k], b['state_dict'][k])]
    assert not differ, f'{len(differ)} of {len(a["state_dict"])} tensors differ: {differ[:5]}'
    sa, sb = a['optimizer']['state'], b['optimizer']['state']
    assert sa.keys() == sb.keys()
    differ = [(i, n) for i in sa for n in sa[i] if not torch_equal(sa[i][n], sb[i][n])]
    assert not differ, f'optimizer state differs: {differ[:5]}'


def torch_equal(a, b) -> bool:
    import torch
    return torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b


def scalars(work_dir: Path) -> Dict[int, dict]:
    """Training scalars logged per iteration, over all runs in ``work_dir`` (later
    runs, e.g. a resumed one, override earlier entries of the same iteration)."""
    out = {}
    for path in sorted(work_dir.glob('*/vis_data/scalars.json')):
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if 'iter' in rec and 'loss' in rec:
                out[rec['iter']] = rec
    return out


def load_checkpoint(path) -> dict:
    import torch

    import inline_mm  # noqa: F401  (mmengine checkpoint types on torch's allowlist)
    return torch.load(path, map_location='cpu', weights_only=True)


def max_state_diff(a: dict, b: dict) -> float:
    """Largest absolute difference between two state dicts with the same keys."""
    assert a.keys() == b.keys(), set(a) ^ set(b)
    return max(float((a[k].double() - b[k].double()).abs().max()) if a[k].numel() else 0.
               for k in a if a[k].is_floating_point())


# ------------------------------------------------------------------ probes (child side)
@HOOKS.register_module()
class KillBeforeIter(Hook):
    """Before iteration ``at`` (1-based, as logged) the process kills itself with SIGKILL:
    a kill at a fixed point between checkpoints, in every process of a distributed run."""

    def __init__(self, at: int):
        self.at = at

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        if runner.iter + 1 == self.at:
            os.kill(os.getpid(), signal.SIGKILL)


@HOOKS.register_module()
class InjectNaN(Hook):
    """Multiply the output of module ``name`` by NaN at iteration ``at`` (1-based), in
    the process of rank ``rank`` only (its re-run included)."""

    def __init__(self, name: str, at: int, rank: int = 0):
        self.name, self.at, self.rank = name, at, rank

    def before_train(self, runner):
        from mmengine.dist import get_rank
        model = runner.model.module if hasattr(runner.model, 'module') else runner.model
        target = dict(model.named_modules())[self.name]

        def inject(module, inputs, output):
            if runner.iter + 1 == self.at and get_rank() == self.rank:
                return output * float('nan')
            return output
        target.register_forward_hook(inject)


@HOOKS.register_module()
class SlowCheckpointWrite(Hook):
    """Make the write of checkpoint file ``name`` stop halfway (the first half on disk),
    write ``marker`` and sleep: a test kills the process in the middle of a save."""

    def __init__(self, name: str, marker: str, seconds: float = TIMEOUT):
        self.name, self.marker, self.seconds = name, marker, seconds

    def before_train(self, runner):
        from mmengine.fileio.backends import LocalBackend
        put = LocalBackend.put
        probe = self

        def slow_put(backend, obj, filepath):
            if osp.basename(str(filepath)) != probe.name:
                return put(backend, obj, filepath)
            with open(filepath, 'wb') as f:
                f.write(obj[:len(obj) // 2])
                f.flush()
                os.fsync(f.fileno())
                Path(probe.marker).touch()
                time.sleep(probe.seconds)
                f.write(obj[len(obj) // 2:])

        LocalBackend.put = slow_put


@HOOKS.register_module()
class LowPrecisionProbe(Hook):
    """What a run in low precision computed, written as JSON to ``out`` at its end: the
    dtypes of the InLine attention's outputs in training and in evaluation, the dtypes of
    the floating tensors of the predictions the metrics received, and whether training
    changed the backbone's weights. ``amp_on_cpu``: ``AmpOptimWrapper`` is let start
    without a GPU (mmengine refuses it; torch's CPU autocast is bf16, its GradScaler off)."""

    def __init__(self, out: str, amp_on_cpu: bool = False):
        import torch
        from mmengine.optim.optimizer import amp_optimizer_wrapper
        self.out = out
        if amp_on_cpu and not torch.cuda.is_available():
            amp_optimizer_wrapper.is_cuda_available = lambda: True
        self.seen = {'train': set(), 'eval': set(), 'predictions': set()}
        self.before = None
        self.changed = None

    def before_run(self, runner):
        from inline_mm.models.attention import InLineAttention
        model = runner.model.module if hasattr(runner.model, 'module') else runner.model

        def record(module, inputs, output):
            self.seen['train' if module.training else 'eval'].add(str(output.dtype))
        for module in model.modules():
            if isinstance(module, InLineAttention):
                module.register_forward_hook(record)

    def before_train(self, runner):
        model = runner.model.module if hasattr(runner.model, 'module') else runner.model
        self.before = [p.detach().clone() for p in model.backbone.parameters()]

    def after_train(self, runner):
        import torch
        model = runner.model.module if hasattr(runner.model, 'module') else runner.model
        self.changed = any(not torch.equal(a, b)
                           for a, b in zip(self.before, model.backbone.parameters()))

    def _predictions(self, outputs):
        import torch
        from mmengine.structures import BaseDataElement
        if isinstance(outputs, torch.Tensor):
            if outputs.is_floating_point():
                self.seen['predictions'].add(str(outputs.dtype))
        elif isinstance(outputs, BaseDataElement):
            for _, value in outputs.items():
                self._predictions(value)
        elif isinstance(outputs, (list, tuple)):
            for value in outputs:
                self._predictions(value)

    def after_val_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        self._predictions(outputs)

    def after_test_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        self._predictions(outputs)

    def after_run(self, runner):
        Path(self.out).write_text(json.dumps(
            {**{k: sorted(v) for k, v in self.seen.items()}, 'backbone_changed': self.changed}))


def toy_ade(out: Path, num_train: int = 24, size: int = 64) -> Path:
    from inline_mm.datasets.toy.segmentation import make_ade_toy
    if not (out / 'images').is_dir():
        make_ade_toy(str(out), num_train=num_train, num_val=2, size=size)
    return out


def toy_coco(out: Path, num_train: int = 8, size: int = 96) -> Path:
    from inline_mm.datasets.toy.coco import make_coco_toy
    if not (out / 'annotations').is_dir():
        make_coco_toy(str(out), num_train=num_train, num_val=2, size=size, max_objects=2)
    return out


def pipe_opts(data_root: Path, extra: Optional[Sequence[str]] = None) -> List[str]:
    return [f'train_dataloader.dataset.data_root={data_root}', *(extra or [])]
