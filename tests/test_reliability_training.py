"""Killed runs resume exactly; 2 CPU processes train like 1; SyncBN and DDP on CPU.

Every run here is a real ``tools/train.py`` process (alone, or 2 gloo processes through
``tools/dist_train.sh``) on a shrunken shipped config and a toy dataset. The UperNet reference
is one uninterrupted single-process run of 6 iterations, batch 4, checkpoints at 3 and 6,
with GroupNorm heads so that the batch split across processes does not matter, and nothing
drawn after initialisation. The Mask R-CNN runs draw random numbers at every iteration
(drop-path, flips, a shuffled sampler, the RPN and RoI samplers) and validate at each
checkpoint; killed with SIGKILL between checkpoints and resumed, they must end bit-equal to
the uninterrupted run.
"""
import pytest

from reliability_support import (DRAWS, assert_same_run, load_checkpoint, max_state_diff, pipe_opts,
                                 run, run_until_then_kill, scalars, tiny_config, toy_ade, toy_coco,
                                 train_cmd)

pytestmark = [pytest.mark.slow, pytest.mark.subprocess]

GN_HEADS = """
gn = dict(type='GN', num_groups=4, requires_grad=True)
model = dict(decode_head=dict(norm_cfg=gn), auxiliary_head=dict(norm_cfg=gn))
default_hooks = dict(checkpoint=dict(interval=3))
custom_hooks = [dict(type='NonFiniteCheckHook')]
"""


@pytest.fixture(scope='module')
def data(tmp_path_factory):
    return toy_ade(tmp_path_factory.mktemp('ade'))


@pytest.fixture(scope='module')
def reference(tmp_path_factory, data):
    """One process, batch 4, 6 iterations, checkpoints at 3 and 6."""
    tmp = tmp_path_factory.mktemp('reference')
    cfg = tiny_config(tmp, 'upernet', extra=GN_HEADS, name='gn')
    wd = tmp / 'work'
    run(train_cmd(cfg, wd, pipe_opts(data, ['train_dataloader.batch_size=4'])), tmp / 'log.txt')
    return dict(tmp=tmp, cfg=cfg, work=wd, scalars=scalars(wd))


def _resume_matches_reference(reference, wd, first_resumed_iter):
    ref = reference['work']
    got, want = scalars(wd), reference['scalars']
    for it in range(first_resumed_iter, 7):
        # Same iteration, same learning rate, same data, same loss.
        assert got[it]['lr'] == want[it]['lr'], it
        assert got[it]['loss'] == want[it]['loss'], it
    a, b = load_checkpoint(wd / 'iter_6.pth'), load_checkpoint(ref / 'iter_6.pth')
    assert a['meta']['iter'] == b['meta']['iter'] == 6
    # Bit-equal weights and AdamW moments (equal only when the optimizer state was restored).
    assert_same_run(a, b)
    assert a['param_schedulers'] == b['param_schedulers']


def test_sigkill_during_save_never_resumes_from_partial_file(reference, data, tmp_path):
    """Killed while writing iter_6.pth with max_keep_ckpts=1: stock mmengine 0.10.7 has
    already deleted iter_3.pth at that point (nothing left to resume); inline_mm defers
    the deletion, and the half-written file is never picked."""
    marker = tmp_path / 'saving'
    extra = GN_HEADS + (
        "\ndefault_hooks = dict(checkpoint=dict(interval=3, max_keep_ckpts=1))\n"
        f"custom_hooks = [dict(type='SlowCheckpointWrite', name='iter_6.pth', "
        f"marker={str(marker)!r})]\n")
    cfg = tiny_config(tmp_path, 'upernet', extra=extra, name='gn_slow', probes=True)
    wd = tmp_path / 'work'
    opts = pipe_opts(data, ['train_dataloader.batch_size=4'])
    run_until_then_kill(train_cmd(cfg, wd, opts), tmp_path / 'killed.txt', marker)
    partial = wd / 'iter_6.pth'
    assert partial.is_file() and (wd / 'iter_3.pth').is_file()
    assert 0 < partial.stat().st_size < (wd / 'iter_3.pth').stat().st_size
    assert (wd / 'last_checkpoint').read_text().strip().endswith('iter_3.pth')

    plain = tiny_config(tmp_path, 'upernet', extra=GN_HEADS, name='gn_plain')
    log = tmp_path / 'resumed.txt'
    run(train_cmd(plain, wd, opts, resume=True), log)
    assert 'resumed epoch: 0, iter: 3' in log.read_text()
    _resume_matches_reference(reference, wd, 4)


@pytest.fixture(scope='module')
def coco(tmp_path_factory):
    return toy_coco(tmp_path_factory.mktemp('coco'))


def _draws_opts(coco):
    return [f'train_dataloader.dataset.data_root={coco}',
            f'val_dataloader.dataset.data_root={coco}',
            f'val_evaluator.ann_file={coco}/annotations/instances_val2017.json']


@pytest.mark.parametrize('nproc', [1, 2])
def test_mask_rcnn_killed_between_checkpoints_resumes_bit_equal(coco, tmp_path, nproc):
    """The shipped Mask R-CNN recipe (shrunk; drop-path 0.1, RandomFlip, shuffled sampler,
    the RPN and RoI samplers, validation at each checkpoint), 6 iterations, checkpoints at 3
    and 6; one process, or two gloo processes seeded differently (diff_rank_seed). Killed
    with SIGKILL before iteration 5 and resumed from iter_3.pth: the final weights and AdamW
    state equal the uninterrupted run's bit for bit, and so do the losses of iterations
    4-6."""
    opts = _draws_opts(coco) + ['randomness.diff_rank_seed=True']
    whole = tmp_path / 'whole'
    draws = DRAWS.read_text()
    cfg = tiny_config(tmp_path, 'mask_rcnn', body='mask_rcnn', extra=draws, name='draws')
    run(train_cmd(cfg, whole, opts, nproc=nproc), tmp_path / 'whole.txt')

    killing = tiny_config(tmp_path, 'mask_rcnn', body='mask_rcnn', name='draws_kill',
                          extra=draws + "custom_hooks = [dict(type='KillBeforeIter', at=5)]\n",
                          probes=True)
    cut = tmp_path / 'cut'
    run(train_cmd(killing, cut, opts, nproc=nproc), tmp_path / 'killed.txt', expect_ok=False)
    assert (cut / 'iter_3.pth').is_file() and not (cut / 'iter_6.pth').exists()
    assert 4 in scalars(cut) and 5 not in scalars(cut)
    # Resumed with a plain config, as a user would.
    log = tmp_path / 'resumed.txt'
    run(train_cmd(cfg, cut, opts, nproc=nproc, resume=True), log)
    text = log.read_text()
    assert 'resumed epoch: 0, iter: 3' in text and 'not exactly' not in text, text[-3000:]
    got, want = scalars(cut), scalars(whole)
    assert [got[it]['loss'] for it in (4, 5, 6)] == [want[it]['loss'] for it in (4, 5, 6)]
    assert_same_run(load_checkpoint(cut / 'iter_6.pth'), load_checkpoint(whole / 'iter_6.pth'))


def test_two_processes_match_one_process(reference, data, tmp_path):
    """3 iterations, global batch 4: 2 gloo processes x 2 images == 1 process x 4."""
    wd = tmp_path / 'work'
    opts = pipe_opts(data, ['train_dataloader.batch_size=2', 'train_cfg.max_iters=3'])
    log = tmp_path / 'dist.txt'
    run(train_cmd(reference['cfg'], wd, opts, nproc=2), log)
    assert 'Distributed training: True' in log.read_text()
    two = load_checkpoint(wd / 'iter_3.pth')['state_dict']
    one = load_checkpoint(reference['work'] / 'iter_3.pth')['state_dict']
    six = load_checkpoint(reference['work'] / 'iter_6.pth')['state_dict']
    assert max_state_diff(two, one) < 1e-4
    # The bound means something: 3 more iterations move the weights far more.
    assert max_state_diff(six, one) > 1e-3
    assert scalars(wd)[3]['lr'] == pytest.approx(reference['scalars'][3]['lr'], rel=1e-12)


def test_nonfinite_loss_in_one_process_stops_all(data, tmp_path):
    """NaN in rank 1 only, at iteration 2: both processes stop there (no hang in the
    gradient all-reduce), rank 1 names the module, rank 0 points to rank 1."""
    module = 'backbone.layers.2.blocks.0.attn'
    extra = GN_HEADS + (f"custom_hooks = [dict(type='NonFiniteCheckHook'), dict(type='InjectNaN', "
                        f"name={module!r}, at=2, rank=1)]\n")
    cfg = tiny_config(tmp_path, 'upernet', extra=extra, name='nan', probes=True)
    log = tmp_path / 'log.txt'
    run(train_cmd(cfg, tmp_path / 'work', pipe_opts(data), nproc=2), log, expect_ok=False,
        timeout=120)
    text = log.read_text()
    assert 'non-finite loss at iteration 2: decode.loss_ce=nan' in text, text[-4000:]
    assert 'Processes with a non-finite loss: rank(s) [1]' in text
    assert f"output of module '{module}' (InLineAttention)" in text
    assert "in process(es) of rank [1] (this one, rank 0, had finite losses)" in text
    assert 'Iter(train) [2/' not in text


def test_shipped_syncbn_config_trains_on_two_cpu_processes(data, tmp_path):
    """The shipped UperNet config keeps mmseg's SyncBN heads (and the nccl backend):
    on CPU processes they become BN, with one warning, instead of crashing."""
    cfg = tiny_config(tmp_path, 'upernet', name='syncbn')
    wd = tmp_path / 'work'
    log = tmp_path / 'log.txt'
    run(train_cmd(cfg, wd, pipe_opts(data, ['train_cfg.max_iters=2']), nproc=2), log)
    text = log.read_text()
    assert text.count('SyncBatchNorm needs GPU tensors') == 1, text[-4000:]
    assert 'were converted to plain BatchNorm' in text
    assert (wd / 'iter_2.pth').is_file()


def test_detector_ddp_with_cp_and_frozen_stages(tmp_path_factory, tmp_path):
    """Mask R-CNN, 2 CPU processes, checkpointed blocks and a frozen stem + stage 0:
    DDP (find_unused_parameters=False, as shipped) must not find unused parameters."""
    coco = toy_coco(tmp_path_factory.mktemp('coco'))
    cfg = tiny_config(tmp_path, 'mask_rcnn', body='mask_rcnn', name='det')
    wd = tmp_path / 'work'
    log = tmp_path / 'log.txt'
    opts = [f'train_dataloader.dataset.data_root={coco}', 'train_cfg.max_iters=3']
    run(train_cmd(cfg, wd, opts, nproc=2), log)
    text = log.read_text()
    assert 'Distributed training: True' in text
    assert 'Iter(train) [3/3]' in text
    dumped = (wd / 'det.py').read_text()
    assert 'with_cp=True' in dumped and 'frozen_stages=1' in dumped
    assert load_checkpoint(wd / 'iter_3.pth')['meta']['iter'] == 3
