"""Fast checks that a killed and resumed run is the uninterrupted run: the random state in
the checkpoints (inline_mm.patches.random_state), the newest complete checkpoint and the
deletions a killed process left undone (inline_mm.patches.checkpointing), data workers that
die with their parent (inline_mm.patches.workers). A mmengine Runner on a toy model that
draws from every generator, in this process (tests/conftest.py switches the engine rows on,
as tools/train.py does); a "kill" is an exception raised at a fixed point. The Mask R-CNN
runs killed with SIGKILL are in tests/test_reliability_training.py."""
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import torch
import torch.nn as nn
from mmengine.evaluator import BaseMetric, Evaluator
from mmengine.hooks import Hook
from mmengine.model import BaseModel
from mmengine.runner import Runner
from torch.utils.data import Dataset

from inline_mm.patches import checkpointing, random_state, workers
from inline_mm.patches.random_state import KEY


class _Drawing(BaseModel):
    """Draws from torch's generator in training (dropout, a permutation) and in prediction."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 1)
        self.drop = nn.Dropout(0.5)

    def forward(self, inputs, data_samples=None, mode='tensor'):
        x = self.drop(inputs)[torch.randperm(len(inputs))]
        out = self.fc(x)
        return dict(loss=out.pow(2).mean()) if mode == 'loss' else out


class _Draws(Dataset):
    """A sample drawn from numpy's and Python's generators, in the main process
    (``num_workers=0``), as augmentations draw."""

    def __len__(self):
        return 8

    def __getitem__(self, i):
        noise = np.random.rand(4) + random.random()
        return dict(inputs=torch.full((4,), float(i)) + torch.from_numpy(noise).float())


class _Sum(BaseMetric):
    def process(self, data_batch, data_samples):
        self.results.append(sum(float(s.sum()) for s in data_samples))

    def compute_metrics(self, results):
        return dict(total=sum(results))


class _KillAt(Hook):
    """Stands for SIGKILL before iteration ``at`` (1-based): an exception nobody handles."""

    def __init__(self, at):
        self.at = at

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        if runner.iter + 1 == self.at:
            raise KeyboardInterrupt(f'killed before iteration {self.at}')


def _runner(work_dir, by_epoch=False, kill_at=None, max_keep_ckpts=-1, seed=0):
    """8 samples, batch 2: iteration-based, 10 iterations, checkpoint and validation every 4
    (an endless shuffled sampler), or epoch-based, 3 epochs of 4 iterations, checkpoint and
    validation every epoch (a shuffled sampler)."""
    sampler = 'DefaultSampler' if by_epoch else 'InfiniteSampler'
    loader = dict(dataset=_Draws(), batch_size=2, num_workers=0,
                  sampler=dict(type=sampler, shuffle=True),
                  collate_fn=dict(type='default_collate'))
    val_loader = dict(loader, sampler=dict(type='DefaultSampler', shuffle=False))
    torch.manual_seed(seed)         # the same initial weights in every run
    return Runner(
        model=_Drawing(), work_dir=str(work_dir), experiment_name=f'{work_dir.name}_{time.time()}',
        train_dataloader=loader, val_dataloader=val_loader, val_evaluator=Evaluator([_Sum()]),
        val_cfg=dict(),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=1e-3, momentum=0.9)),
        train_cfg=(dict(by_epoch=True, max_epochs=3, val_interval=1) if by_epoch else
                   dict(by_epoch=False, max_iters=10, val_interval=4)),
        default_hooks=dict(checkpoint=dict(type='CheckpointHook', by_epoch=by_epoch,
                                           interval=1 if by_epoch else 4,
                                           max_keep_ckpts=max_keep_ckpts)),
        custom_hooks=[_KillAt(kill_at)] if kill_at else [],
        randomness=dict(seed=seed), default_scope='mmengine')


def _log(work_dir) -> str:
    """What the runs in ``work_dir`` logged (mmengine's logger does not propagate)."""
    return '\n'.join(p.read_text() for p in sorted(work_dir.glob('*/*.log')))


def _train(runner, resume=False):
    runner._resume = resume
    runner.train()
    return runner


def _killed(runner):
    with pytest.raises(KeyboardInterrupt):
        runner.train()


def _load(path):
    return torch.load(path, map_location='cpu', weights_only=True)


def _assert_same_run(a, b):
    """Bit-equal weights and optimizer state (momentum buffers)."""
    a, b = _load(a), _load(b)
    assert a['meta']['iter'] == b['meta']['iter']
    for k in a['state_dict']:
        assert torch.equal(a['state_dict'][k], b['state_dict'][k]), k
    for i, s in a['optimizer']['state'].items():
        for name, t in s.items():
            assert torch.equal(t, b['optimizer']['state'][i][name]), (i, name)


@pytest.mark.parametrize('by_epoch', [False, True], ids=['iter-based', 'epoch-based'])
def test_killed_between_checkpoints_resumes_bit_equal(tmp_path, by_epoch):
    """Killed before iteration 7 (iteration-based: checkpoint at 4, validated there) or 10
    (epoch-based: in epoch 3, checkpoint after epoch 2), resumed: the final weights and
    momentum equal the uninterrupted run's bit for bit, and so do those of a resumed run
    whose validation drew numbers (validation runs on a copy of the generators)."""
    last = 'epoch_3.pth' if by_epoch else 'iter_10.pth'
    _train(_runner(tmp_path / 'whole', by_epoch))
    _killed(_runner(tmp_path / 'cut', by_epoch, kill_at=10 if by_epoch else 7))
    assert (tmp_path / 'cut' / ('epoch_2.pth' if by_epoch else 'iter_4.pth')).is_file()
    assert not (tmp_path / 'cut' / last).exists()
    _train(_runner(tmp_path / 'cut', by_epoch), resume=True)
    assert 'resumed epoch' in _log(tmp_path / 'cut') and 'not exactly' not in _log(tmp_path / 'cut')
    _assert_same_run(tmp_path / 'whole' / last, tmp_path / 'cut' / last)


def test_checkpoints_hold_every_generator_and_load_safely(tmp_path):
    """The state is in every checkpoint, tensors and numbers only (torch's weights_only
    load), and restoring it gives the generators back."""
    _train(_runner(tmp_path))
    states = _load(tmp_path / 'iter_4.pth')['meta'][KEY]
    assert len(states) == 1 and set(states[0]) == {'torch', 'cuda', 'numpy', 'python'}
    state = random_state.capture()
    expected = (torch.rand(3), np.random.rand(3), random.random())
    torch.rand(5), np.random.rand(5), random.random()
    random_state.restore(state)
    again = (torch.rand(3), np.random.rand(3), random.random())
    assert torch.equal(expected[0], again[0]) and np.array_equal(expected[1], again[1])
    assert expected[2] == again[2]


def test_cuda_state_saved_and_restored(monkeypatch):
    """The current CUDA device's generator is part of the state where CUDA is in use (the
    CUDA calls stubbed: this machine may have no GPU)."""
    calls = []
    cuda = torch.cuda
    monkeypatch.setattr(cuda, 'is_available', lambda: True)
    monkeypatch.setattr(cuda, 'is_initialized', lambda: True)
    monkeypatch.setattr(cuda, 'current_device', lambda: 3)
    monkeypatch.setattr(cuda, 'get_rng_state', lambda device='cuda': (
        calls.append(('get', device)) or torch.arange(16, dtype=torch.uint8)))
    monkeypatch.setattr(cuda, 'set_rng_state', lambda state, device='cuda': calls.append(
        ('set', device, state.tolist())))
    state = random_state.capture()
    assert torch.equal(state['cuda'], torch.arange(16, dtype=torch.uint8))
    random_state.restore(state)
    assert calls == [('get', 3), ('set', 3, list(range(16)))]
    # a state saved without CUDA leaves the CUDA generator alone
    random_state.restore(dict(state, cuda=None))
    assert len(calls) == 2


def _edit_meta(path, edit):
    ckpt = _load(path)
    edit(ckpt['meta'])
    torch.save(ckpt, path)


@pytest.mark.parametrize('case', ['no state', 'two processes'])
def test_resume_without_a_matching_state_says_it_is_not_exact(tmp_path, case):
    """A checkpoint without the state (an older file, another tool's) or saved by another
    number of processes resumes as before, with one line saying it is not exact."""
    _killed(_runner(tmp_path, kill_at=7))
    if case == 'no state':
        _edit_meta(tmp_path / 'iter_4.pth', lambda meta: meta.pop(KEY))
        why = 'it holds no random state'
    else:
        _edit_meta(tmp_path / 'iter_4.pth', lambda meta: meta.update({KEY: meta[KEY] * 2}))
        why = 'it holds the random state of 2 process(es) and this run has 1'
    _train(_runner(tmp_path), resume=True)
    lines = [line for line in _log(tmp_path).splitlines() if 'not exactly' in line]
    assert len(lines) == 1 and why in lines[0], _log(tmp_path)
    assert (tmp_path / 'iter_10.pth').is_file()


def _die_after_save(runner, nth, truncate_record=False):
    """Stands for SIGKILL right after the ``nth`` checkpoint file is complete, before
    ``last_checkpoint`` is (re)written; ``truncate_record``: while it is rewritten (empty)."""
    save, saves = runner.save_checkpoint, []

    def dying_save(*args, **kwargs):
        save(*args, **kwargs)
        saves.append(1)
        if len(saves) == nth:
            if truncate_record:
                open(os.path.join(runner.work_dir, 'last_checkpoint'), 'w').close()
            raise KeyboardInterrupt('killed after the save')
    runner.save_checkpoint = dying_save


def test_resume_takes_a_newer_complete_checkpoint_than_last_checkpoint(tmp_path):
    """Killed after iter_8.pth was complete and before last_checkpoint named it: the
    resumed run starts from iter_8.pth, says so, and ends as the uninterrupted run."""
    _train(_runner(tmp_path / 'whole'))
    runner = _runner(tmp_path / 'cut')
    _die_after_save(runner, 2)
    with pytest.raises(KeyboardInterrupt):
        runner.train()
    assert (tmp_path / 'cut/last_checkpoint').read_text().endswith('iter_4.pth')
    _train(_runner(tmp_path / 'cut'), resume=True)
    log = _log(tmp_path / 'cut')
    assert 'is newer and complete' in log and 'resumed epoch: 0, iter: 8' in log
    _assert_same_run(tmp_path / 'whole/iter_10.pth', tmp_path / 'cut/iter_10.pth')


def test_a_deletion_the_kill_stopped_is_made_at_the_next_save(tmp_path):
    """max_keep_ckpts=1, killed while last_checkpoint was being rewritten after iter_8.pth:
    the resume falls back to iter_8.pth, and iter_4.pth, which the killed process was
    about to delete, goes at the next save: max_keep_ckpts holds again."""
    runner = _runner(tmp_path, max_keep_ckpts=1)
    _die_after_save(runner, 2, truncate_record=True)
    with pytest.raises(KeyboardInterrupt):
        runner.train()
    assert sorted(p.name for p in tmp_path.glob('iter_*.pth')) == ['iter_4.pth', 'iter_8.pth']
    _train(_runner(tmp_path, max_keep_ckpts=1), resume=True)
    assert 'resumed epoch: 0, iter: 8' in _log(tmp_path)
    assert sorted(p.name for p in tmp_path.glob('iter_*.pth')) == ['iter_10.pth']
    assert 'iter_4.pth: the process that saved the checkpoint this run resumed from was ' \
        'killed before deleting it' in _log(tmp_path)


def test_find_resumable_takes_newer_only_of_this_run(tmp_path):
    """A larger step written earlier (an older run's file in the same work dir) is not
    taken; nor is one of the other kind."""
    for name in ('iter_4.pth', 'iter_8.pth', 'epoch_9.pth'):
        torch.save({'state_dict': {}}, tmp_path / name)
    now = time.time()
    os.utime(tmp_path / 'iter_8.pth', (now - 100, now - 100))      # an older run's
    four = str(tmp_path / 'iter_4.pth')
    assert checkpointing.find_resumable(str(tmp_path), four) == four
    os.utime(tmp_path / 'iter_8.pth', (now + 100, now + 100))
    warnings = []
    assert checkpointing.find_resumable(str(tmp_path), four, warnings.append) == \
        str(tmp_path / 'iter_8.pth')
    assert len(warnings) == 1 and 'is newer and complete' in warnings[0]


def test_installed_once():
    before = [getattr(Runner, n) for n in ('save_checkpoint', 'load_checkpoint', 'resume',
                                           'build_val_loop', 'build_dataloader')]
    random_state.install()
    workers.install()
    assert random_state.installed() and workers.installed()
    assert before == [getattr(Runner, n) for n in ('save_checkpoint', 'load_checkpoint',
                                                   'resume', 'build_val_loop',
                                                   'build_dataloader')]


# ------------------------------------------------------------------ data workers
_ORPHAN = textwrap.dedent('''
    import os, sys, time
    import torch
    from torch.utils.data import Dataset
    import inline_mm.engine
    from mmengine.runner import Runner
    inline_mm.engine.install()

    class Slow(Dataset):
        """A sample that takes long: the worker is busy, not watching its parent."""
        def __len__(self):
            return 4
        def __getitem__(self, i):
            with open(sys.argv[1] + '.tmp', 'w') as f:
                f.write(str(os.getpid()))
            os.replace(sys.argv[1] + '.tmp', sys.argv[1])
            time.sleep(300)
            return torch.zeros(1)

    def own_init(worker_id):
        open(sys.argv[1] + '.init', 'w').close()

    loader = Runner.build_dataloader(dict(
        dataset=Slow(), batch_size=1, num_workers=1, sampler=dict(type='DefaultSampler'),
        worker_init_fn=dict(type=own_init)), seed=0)
    next(iter(loader))
''')


@pytest.mark.subprocess
@pytest.mark.skipif(not workers._needed()[0], reason='no parent-death signal on this platform')
def test_a_busy_worker_ends_with_its_killed_parent(tmp_path):
    """A process builds a loader with Runner.build_dataloader and a worker_init_fn of its
    own; its worker is busy in a slow sample when the process is killed with SIGKILL: the
    worker is gone within seconds (without the row it sleeps on for minutes)."""
    marker = tmp_path / 'worker_pid'
    script = tmp_path / 'orphan.py'
    script.write_text(_ORPHAN)
    parent = subprocess.Popen([sys.executable, str(script), str(marker)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker = None
    try:
        deadline = time.time() + 120
        while not marker.exists():
            assert parent.poll() is None and time.time() < deadline, 'no worker started'
            time.sleep(0.05)
        worker = int(marker.read_text())
        assert (tmp_path / 'worker_pid.init').exists()      # the loader's own worker_init_fn
        parent.kill()
        parent.wait()
        deadline = time.time() + 10
        while _alive(worker) and time.time() < deadline:
            time.sleep(0.05)
        assert not _alive(worker), 'the worker outlived its killed parent'
    finally:
        if parent.poll() is None:
            parent.kill()
        if worker is not None and _alive(worker):
            os.kill(worker, signal.SIGKILL)


def _alive(pid):
    """Running (a zombie waiting to be reaped by init has ended)."""
    try:
        with open(f'/proc/{pid}/stat') as f:
            return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except FileNotFoundError:
        return False


def test_the_worker_init_fn_runs_after_the_parent_death_request(monkeypatch):
    """The loader's own worker_init_fn (mmengine's seeding, the config's) still runs, after
    the request; a parent already gone when the worker starts ends the worker."""
    import ctypes
    calls = []

    class Libc:
        def prctl(self, *args):
            calls.append(('prctl', args[:2]))
            return 0
    monkeypatch.setattr(ctypes, 'CDLL', lambda *a, **k: Libc())
    init = workers.DieWithParent(lambda worker_id: calls.append(('init', worker_id)),
                                 parent=os.getppid())
    init(3)
    assert calls == [('prctl', (workers.PR_SET_PDEATHSIG, signal.SIGKILL)), ('init', 3)]
    killed = []
    monkeypatch.setattr(os, 'kill', lambda pid, sig: killed.append((pid, sig)))
    workers.DieWithParent(None, parent=-1)(0)
    assert killed == [(os.getpid(), signal.SIGKILL)]
