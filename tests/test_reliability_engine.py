"""Fast checks of inline_mm.engine's changes to mmengine: checkpoint pruning after the
save, the resume fallback, and that the changes are installed once and only where
mmengine fails. They run with the changes switched on (tests/conftest.py does it, as
tools/train.py does); that a bare import switches nothing on is in test_package.py. The
end-to-end versions (real processes killed with SIGKILL) are in
tests/test_reliability_training.py."""
import logging
import re
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
from mmengine.hooks import CheckpointHook
from mmengine.model import BaseModel
from mmengine.runner import Runner
from torch.utils.data import DataLoader, TensorDataset

import inline_mm.engine
from inline_mm.patches import checkpointing, distributed, empty_datasets
from inline_mm.patches.checkpointing import find_resumable, is_complete_checkpoint
from inline_mm.patches import find
from inline_mm.patches import table as patches
from support import ROOT


class _Toy(BaseModel):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 1)

    def forward(self, inputs, data_samples=None, mode='tensor'):
        out = self.fc(inputs)
        return dict(loss=out.pow(2).mean()) if mode == 'loss' else out


def _toy_runner(work_dir, name, max_keep_ckpts=1):
    data = TensorDataset(torch.randn(16, 2))
    return Runner(
        model=_Toy(), work_dir=str(work_dir), experiment_name=name,
        train_dataloader=DataLoader(data, batch_size=2),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.1)),
        train_cfg=dict(by_epoch=False, max_iters=6),
        default_hooks=dict(checkpoint=dict(type='CheckpointHook', by_epoch=False, interval=2,
                                           max_keep_ckpts=max_keep_ckpts)),
        default_scope='mmengine')


def _kill_during_second_save(runner):
    save = runner.save_checkpoint
    saves = []

    def dying_save(*args, **kwargs):
        saves.append(1)
        if len(saves) == 2:
            raise KeyboardInterrupt('killed while saving')
        return save(*args, **kwargs)
    runner.save_checkpoint = dying_save


def test_old_checkpoint_survives_a_failed_save(tmp_path, monkeypatch):
    runner = _toy_runner(tmp_path / 'ours', 'prune_ours')
    _kill_during_second_save(runner)
    with pytest.raises(KeyboardInterrupt):
        runner.train()
    assert (tmp_path / 'ours/iter_2.pth').is_file()
    assert (tmp_path / 'ours/last_checkpoint').read_text().endswith('iter_2.pth')

    # mmengine's own order: the only checkpoint is deleted before the new one exists.
    for name in ('_save_checkpoint_with_step', '_save_best_checkpoint'):
        monkeypatch.setattr(CheckpointHook, name, getattr(CheckpointHook, name).__wrapped__)
    runner = _toy_runner(tmp_path / 'stock', 'prune_stock')
    _kill_during_second_save(runner)
    with pytest.raises(KeyboardInterrupt):
        runner.train()
    assert not (tmp_path / 'stock/iter_2.pth').exists()
    assert (tmp_path / 'stock/last_checkpoint').read_text().endswith('iter_2.pth')


def test_pruning_still_keeps_max_keep_ckpts(tmp_path):
    runner = _toy_runner(tmp_path, 'prune_count', max_keep_ckpts=2)
    runner.train()
    assert sorted(p.name for p in tmp_path.glob('iter_*.pth')) == ['iter_4.pth', 'iter_6.pth']


def _ckpt(path, complete=True):
    torch.save({'state_dict': {'w': torch.ones(64)}}, path)
    if not complete:
        data = path.read_bytes()
        path.write_bytes(data[:len(data) // 2])
    return str(path)


def test_find_resumable(tmp_path):
    good2, good4 = _ckpt(tmp_path / 'iter_2.pth'), _ckpt(tmp_path / 'iter_4.pth')
    partial = _ckpt(tmp_path / 'iter_6.pth', complete=False)
    _ckpt(tmp_path / 'best_mIoU_iter_5.pth')
    assert is_complete_checkpoint(good4) and not is_complete_checkpoint(partial)
    warnings = []
    assert find_resumable(str(tmp_path), None) is None          # a fresh run
    assert find_resumable(str(tmp_path), good4, warnings.append) == good4
    assert not warnings
    # a complete one beside it with a larger step, written no earlier, is taken instead
    assert find_resumable(str(tmp_path), good2, warnings.append) == good4
    assert 'is newer and complete' in warnings.pop()
    assert find_resumable(str(tmp_path), partial, warnings.append) == good4
    assert 'is incomplete' in warnings[-1] and good4 in warnings[-1]
    assert find_resumable(str(tmp_path), '', warnings.append) == good4
    assert 'is empty' in warnings[-1]
    assert find_resumable(str(tmp_path), str(tmp_path / 'iter_8.pth'),
                          warnings.append) == good4
    assert 'does not exist' in warnings[-1]
    assert find_resumable(str(tmp_path), 's3://bucket/iter_9.pth') == 's3://bucket/iter_9.pth'
    empty = tmp_path / 'empty'
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match='holds no complete iter_'):
        find_resumable(str(empty), '')


def test_resume_uses_the_fallback(tmp_path, caplog):
    """Runner(resume=True) with a damaged last_checkpoint resumes from the newest
    complete checkpoint instead of failing on an empty path."""
    _toy_runner(tmp_path, 'fallback_a').train()
    (tmp_path / 'last_checkpoint').write_text('')
    runner = _toy_runner(tmp_path, 'fallback_b')
    runner._resume = True
    runner.load_or_resume()
    assert runner.iter == 6


def test_installed_once_and_only_for_cpu_distributed():
    inline_mm.engine.install()
    assert inline_mm.engine.installed()
    wrap = Runner.wrap_model
    build = Runner.build_dataloader
    distributed.install()
    checkpointing.install_prune()
    checkpointing.install_fallback()
    empty_datasets.install()
    assert Runner.wrap_model is wrap and Runner.build_dataloader is build
    assert not getattr(wrap.__wrapped__, '_inline_mm_cpu_ddp', False)
    # Not distributed: mmengine's own path (SyncBN reverted, no wrapper).
    runner = _toy_runner_stub()
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.SyncBatchNorm(4))
    out = Runner.wrap_model(runner, None, model)
    assert not any(isinstance(m, nn.SyncBatchNorm) for m in out.modules())
    assert not isinstance(out, torch.nn.parallel.DistributedDataParallel)


@pytest.mark.parametrize('fails', [False, True])
def test_the_tools_close_the_process_group_of_a_finished_run(monkeypatch, fails):
    """tools/train.py and tools/test.py free the finished run (a Runner lives on in reference
    cycles after the stock script returns) and then destroy the default process group, while
    the interpreter is alive: left to interpreter exit, gloo's threads can abort a run that
    went well. A script that failed leaves the group alone (its peers may still be
    communicating)."""
    import torch.distributed as dist

    from inline_mm.cli import launch
    config = str(ROOT / 'configs' / 'inline_swin' /
                 'mask-rcnn_inline-swin-nano_fpn_1xb4-550it_toy-coco.py')
    freed = []

    class Run:
        """Stands for the Runner: in a cycle, as mmengine's is (hooks point back at it)."""

        def __init__(self):
            self.me = self

        def __del__(self):
            freed.append(dist.is_initialized())

    def stock_script(path, run_name):
        dist.init_process_group('gloo', store=dist.HashStore(), rank=0, world_size=1)
        Run()
        if fails:
            raise RuntimeError('the script failed')
    monkeypatch.setattr(launch.runpy, 'run_path', stock_script)
    monkeypatch.setattr(sys, 'argv', list(sys.argv))
    try:
        if fails:
            with pytest.raises(RuntimeError, match='the script failed'):
                launch.run('train', [config])
        else:
            launch.run('train', [config])
            assert freed == [True]        # freed before the group went
        assert dist.is_initialized() is fails
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


@pytest.mark.subprocess
def test_the_launcher_runs_as_a_module():
    """``python -m inline_mm.cli.launch {train,test} ...`` is tools/train.py and tools/test.py."""
    out = subprocess.run([sys.executable, '-m', 'inline_mm.cli.launch', 'train', '-h'],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and 'usage: python tools/train.py CONFIG' in out.stdout, out
    out = subprocess.run([sys.executable, '-m', 'inline_mm.cli.launch'], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 1 and 'usage: python -m inline_mm.cli.launch' in out.stderr, out


def _toy_runner_stub():
    class Stub:
        distributed = False
        logger = logging.getLogger('stub')
        cfg = {}
    return Stub()


class _Gadget:
    """An object no allowlist names: a checkpoint holding one must be refused."""


def test_checkpoint_outside_the_allowlist_is_refused_on_either_stack(tmp_path):
    """mmengine's loader (what ``load_from``, ``--resume`` and test.py use) refuses a file
    holding an object outside torch's allowlist: torch refuses it on upstream mmengine 0.10.7;
    onedl-mmengine 0.10.12 would retry it with ``weights_only=False`` (code from the file
    runs), which inline_mm.engine's strict loading removes there (and only there)."""
    import pickle

    from mmengine.runner.checkpoint import load_from_local

    from inline_mm.patches import loading
    path = tmp_path / 'gadget.pth'
    torch.save({'state_dict': {}, 'gadget': _Gadget()}, path)
    with pytest.raises(pickle.UnpicklingError, match='weights_only|Unsupported global'):
        load_from_local(str(path), 'cpu')
    # the patch is on exactly where the feature check finds the retrying loader
    assert loading.installed_strict() == find('strict_checkpoint_loading').needed()[0]
    # mmengine's own checkpoints still load (the allowlist of
    # inline_mm.patches.mmengine_checkpoints)
    runner = _toy_runner(tmp_path, 'strict')
    runner.train()
    ckpt = load_from_local(str(tmp_path / 'iter_6.pth'), 'cpu')
    assert ckpt['meta']['iter'] == 6
    # and so does torch's own safe load after mmengine's loader has run (onedl-mmengine's
    # allowlist context removes mmengine's types from torch's global allowlist on exit)
    assert torch.load(tmp_path / 'iter_6.pth', weights_only=True)['meta']['iter'] == 6


def test_feature_checks_run_nothing_and_read_no_source(monkeypatch):
    """Every row of the patch table decides from versions and attributes: no source text is
    read, no file is written, no checkpoint is saved or loaded, no optimiser is built."""
    import builtins
    import inspect
    import tempfile

    import mmengine.optim

    def refuse(*args, **kwargs):
        raise AssertionError(f'a feature check ran a probe: {args[:1]}')

    for module, name in ((inspect, 'getsource'), (inspect, 'getsourcelines'),
                         (inspect, 'findsource'), (torch, 'save'), (torch, 'load'),
                         (tempfile, 'mkstemp'), (tempfile, 'NamedTemporaryFile'),
                         (mmengine.optim, 'build_optim_wrapper')):
        monkeypatch.setattr(module, name, refuse)
    real_open = builtins.open

    def read_only_open(file, mode='r', *args, **kwargs):
        if any(c in mode for c in 'wax+'):
            refuse(file, mode)
        return real_open(file, mode, *args, **kwargs)
    monkeypatch.setattr(builtins, 'open', read_only_open)
    for patch in patches():
        need, why = patch.needed()
        assert isinstance(need, bool) and why, patch.name
    names = [p.name for p in patches()]
    assert len(set(names)) == len(names)
    assert all(p.replaces and p.reason and p.versions for p in patches())


def test_the_patch_table_is_documented():
    """docs/patches.md lists every row of the table, and the rows it lists exist."""
    page = (ROOT / 'docs' / 'patches.md').read_text()
    listed = set(re.findall(r'^\| `(\w+)` \|', page, re.M))
    assert listed == {p.name for p in patches()}, listed ^ {p.name for p in patches()}


def test_env_report_states(monkeypatch):
    """``python -m inline_mm.env``'s states: on, needed but off, not needed, and switched off
    by the row's environment setting."""
    import inline_mm.patches
    from inline_mm import env
    from inline_mm.patches import AT_START, Patch
    rows = [Patch(name, 'x', 'y', 'v', AT_START, lambda n=need: (n, 'why'),
                  lambda a=on: a, switch_off='INLINE_MM_TEST_ROW=0')
            for name, need, on in (('a', True, True), ('b', True, False), ('c', False, False))]
    monkeypatch.setattr(inline_mm.patches, 'table', lambda: tuple(rows))
    monkeypatch.delenv('INLINE_MM_TEST_ROW', raising=False)
    assert [r[1] for r in env.describe_patches()] == ['on', 'needed, off', 'off']
    monkeypatch.setenv('INLINE_MM_TEST_ROW', '0')
    assert [r[1] for r in env.describe_patches()] == ['on', 'switched off', 'off']
