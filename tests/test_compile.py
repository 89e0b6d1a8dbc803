"""Every backbone under ``torch.compile`` serves a stream of padded batches of changing
sizes: one graph without breaks, padding-aware (the same outputs and gradients as eager,
each image its features alone), and recompiles only where the model decides something in
Python from the size (docs/export_and_timm.md states the bound).

The graph capture (dynamo, the part that decides graphs, guards and recompiles) runs
here with ``backend='aot_eager'`` (AOT autograd, forward and backward graphs, no code
generation: seconds); Inductor's code generation on the same graphs takes minutes per
size on 2 cores: the opt-in test at the end (``INLINE_MM_INDUCTOR=1``) and
``python -m benchmarks.compile``.
"""
import os

import pytest
import torch
import torch._dynamo
import torch._dynamo.testing
from support import assert_compiled_matches, padded_canvas, smoke_backbone

from inline_mm.models import FAMILIES

#: sizes of one stream; for the smoke presets every stage of each is wider than a window
#: or none is, so InLine-Swin's window layout is the same (see test_recompile_bound)
STREAM = [(64, 96), (72, 80), (88, 64)]
#: padded batches of one stream (canvas, each image's size): both sides of the canvas
#: and every image's size change from batch to batch
PADDED_STREAM = [((64, 96), [(64, 96), (40, 70)]),
                 ((96, 80), [(70, 80), (96, 50)]),
                 ((80, 64), [(80, 64), (33, 40)])]
#: graphs a stream may compile, every family (docs/export_and_timm.md): the first batch's,
#: then the dynamic one that serves the rest (``dynamic=True`` from the start: one, and
#: dynamo's restart of its analysis; test_a_side_that_fills_its_windows_exactly_...)
GRAPH_BOUND = 3


def _smoke(name):
    return smoke_backbone(name, seed=0).eval()


_check_close = assert_compiled_matches


def _padded_batch(canvas, sizes, seed):
    gen = torch.Generator().manual_seed(seed)
    return padded_canvas([torch.randn(3, h, w, generator=gen) for h, w in sizes], canvas)


@pytest.mark.parametrize('name', list(FAMILIES))
def test_compiled_backbone_keeps_padding_awareness_over_a_stream(name):
    """Compiled, each padded batch of a stream gives the eager padding-aware outputs
    and input gradient (eager on the CPU: the per-sample path; compiled: the batched
    one), and its smallest image the features it gets alone; the number of graphs stays
    within the bound."""
    torch._dynamo.reset()
    model = _smoke(name)
    counts = torch._dynamo.testing.CompileCounterWithBackend('aot_eager')
    compiled = torch.compile(model, backend=counts, fullgraph=True)
    for seed, (canvas, sizes) in enumerate(PADDED_STREAM):
        x = _padded_batch(canvas, sizes, seed)
        xc, xe = x.clone().requires_grad_(), x.clone().requires_grad_()
        got, ref = compiled(xc), model(xe)
        (h, w), last = sizes[-1], len(sizes) - 1
        with torch.no_grad():
            alone = model(x[last:, :, :h, :w])
        for g, r, a in zip(got, ref, alone):
            torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(g[last:, :, :a.shape[2], :a.shape[3]], a,
                                       rtol=1e-5, atol=1e-5)
        sum(o.square().mean() for o in got).backward()
        sum(o.square().mean() for o in ref).backward()
        torch.testing.assert_close(xc.grad, xe.grad, rtol=1e-5, atol=1e-5)
    assert counts.frame_count <= GRAPH_BOUND, counts.frame_count


@pytest.mark.parametrize('name', ['InLineSwin', 'InLineCSwin'])
def test_a_side_that_fills_its_windows_exactly_reuses_the_graph(name):
    """A windowed side that is a multiple of the window (no padding, so the crop after
    the windows is a no-op) must not guard the graph: at detection sizes it is a side in
    every few (InLine-Swin-T at 736x1344 recompiled on it). Smoke presets: the stride-8
    map of 64x112 is 8x14 (InLine-Swin's window 7), the stride-16 stripes of CSwin alike."""
    torch._dynamo.reset()
    model = _smoke(name)
    counts = torch._dynamo.testing.CompileCounterWithBackend('aot_eager')
    compiled = torch.compile(model, backend=counts, dynamic=True, fullgraph=True)
    frames = []
    with torch.no_grad():
        for size in [(64, 96), (64, 112), (80, 104)]:
            x = torch.randn(1, 3, *size)
            for g, r in zip(compiled(x), model(x)):
                torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5)
            frames.append(counts.frame_count)
    assert frames == frames[:1] * 3, frames      # compiled at the first size only


def test_past_the_recompile_limit_the_model_runs_eagerly(caplog):
    """What docs/export_and_timm.md says happens past dynamo's recompile limit (training
    under Inductor recompiles per size; dynamic=False here makes every size a recompile):
    a warning, no more graphs, the model's own eager outputs."""
    torch._dynamo.reset()
    model = _smoke('InLineDeiT')
    counts = torch._dynamo.testing.CompileCounterWithBackend('aot_eager')
    compiled = torch.compile(model, backend=counts, dynamic=False)
    with torch._dynamo.config.patch(recompile_limit=1), torch.no_grad():
        compiled(torch.randn(1, 3, *STREAM[0]))
        x = torch.randn(1, 3, *STREAM[1])
        got = compiled(x)
        assert counts.frame_count == 1, counts.frame_count
        for g, r in zip(got, model(x)):
            assert torch.equal(g, r)
    assert 'recompile_limit' in caplog.text, caplog.text[-2000:]


@pytest.mark.skipif(os.environ.get('INLINE_MM_INDUCTOR') != '1',
                    reason='Inductor compiles take minutes on CPU: INLINE_MM_INDUCTOR=1 runs it')
@pytest.mark.subprocess     # Inductor's compile workers and the system's g++
@pytest.mark.slow
@pytest.mark.parametrize('name', list(FAMILIES))
def test_inductor_dynamic_two_sizes(name):
    """Inductor generates code for each family's dynamic graph and reuses it at a second
    size (InLine-Swin's never finished compiling before its window sizes became
    constants). The first graph may be compiled twice (dynamo restarts its analysis once
    when a float attribute made symbolic by ``dynamic=True`` is specialised), so what is
    counted is the second size: no recompile."""
    torch._dynamo.reset()
    model = _smoke(name)
    counts = torch._dynamo.testing.CompileCounterWithBackend('inductor')
    compiled = torch.compile(model, backend=counts, dynamic=True)
    frames = []
    for size in STREAM[:2]:
        x = torch.randn(1, 3, *size)
        with torch.no_grad():
            for g, r in zip(compiled(x), model(x)):
                torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5)
        frames.append(counts.frame_count)
    assert frames[1] == frames[0], f'{name} recompiled at {STREAM[1]}: {frames}'


class _TinyNet:
    """A model the Runner trains: a linear layer and a LayerNorm (one param group each
    under ``paramwise_cfg``, as every shipped config has)."""

    @staticmethod
    def build():
        from mmengine.model import BaseModel

        class Net(BaseModel):
            def __init__(self):
                super().__init__()
                self.fc = torch.nn.Linear(4, 4)
                self.norm = torch.nn.LayerNorm(4)

            def forward(self, inputs, data_samples=None, mode='tensor'):
                out = self.norm(self.fc(torch.stack(inputs)))
                return dict(loss=out.square().mean()) if mode == 'loss' else out

        return Net()


def test_runner_compile_trains_with_paramwise_groups(tmp_path):
    """``compile=`` in a config compiles the Runner's ``train_step``, optimiser step
    included: with mmengine's ConfigDict parameter groups Dynamo stops at the step
    (inline_mm.patches.compiling makes them plain dicts first). A real Mask R-CNN run with
    Inductor: docs/export_and_timm.md."""
    from mmengine.config import ConfigDict
    from mmengine.optim import build_optim_wrapper
    from mmengine.runner import Runner

    import inline_mm.engine
    from inline_mm.patches.compiling import plain_param_groups
    inline_mm.engine.install()

    optim_cfg = ConfigDict(type='OptimWrapper',
                           optimizer=dict(type='AdamW', lr=1e-2, weight_decay=0.05),
                           paramwise_cfg=dict(norm_decay_mult=0.))
    probe = build_optim_wrapper(_TinyNet.build(), optim_cfg)
    assert any(type(g) is not dict for g in probe.optimizer.param_groups)  # what needs it
    before = [dict(g) for g in probe.optimizer.param_groups]
    assert plain_param_groups(probe) == len(before)
    assert all(type(g) is dict for g in probe.optimizer.param_groups)
    assert [g.keys() for g in probe.optimizer.param_groups] == [g.keys() for g in before]
    assert plain_param_groups(probe) == 0

    torch._dynamo.reset()
    model = _TinyNet.build()
    start = [p.detach().clone() for p in model.parameters()]
    data = [dict(inputs=torch.randn(4)) for _ in range(8)]
    runner = Runner(
        model=model, work_dir=str(tmp_path), optim_wrapper=optim_cfg,
        train_dataloader=dict(dataset=data, sampler=dict(type='DefaultSampler', shuffle=False),
                              batch_size=4, collate_fn=dict(type='pseudo_collate')),
        train_cfg=dict(by_epoch=False, max_iters=2), cfg=dict(compile=dict(backend='eager')),
        default_hooks=dict(checkpoint=None, logger=None), default_scope='mmengine',
        experiment_name='compile_paramwise')
    runner.train()
    assert all(type(g) is dict for g in runner.optim_wrapper.optimizer.param_groups)
    assert any(not torch.equal(a, b) for a, b in zip(start, model.parameters()))


def test_runner_compile_trains_padding_aware_on_padded_batches(tmp_path):
    """``compile=`` in a config trains a backbone on padded batches, padding-aware: the
    first iteration's loss is the eager padding-aware loss (the padding-unaware one
    differs), and training moves the weights."""
    from mmengine.model import BaseModel
    from mmengine.runner import Runner

    from inline_mm.models import InLineDeiT

    class Net(BaseModel):
        """A two-block InLine-DeiT (masked statistics, per-image position tables) on a
        batch zero-padded to its largest image, as mmdet's preprocessor pads; loss: the
        mean square of the features."""

        def __init__(self, pad_aware=True):
            super().__init__()
            self.backbone = InLineDeiT(embed_dims=32, depth=2, num_heads=2, mlp_ratio=1.,
                                       pretrain_img_size=64, drop_path_rate=0.,
                                       out_indices=(1,), pad_aware=pad_aware)

        def forward(self, inputs, data_samples=None, mode='tensor'):
            h = max(int(i.shape[1]) for i in inputs)
            w = max(int(i.shape[2]) for i in inputs)
            x = torch.stack([torch.nn.functional.pad(i, (0, w - i.shape[2], 0, h - i.shape[1]))
                             for i in inputs])
            loss = sum(o.square().mean() for o in self.backbone(x))
            return dict(loss=loss) if mode == 'loss' else loss

    gen = torch.Generator().manual_seed(0)
    data = [dict(inputs=torch.randn(3, *s, generator=gen))
            for s in [(64, 96), (40, 70), (64, 64), (48, 56)]]
    torch.manual_seed(0)
    model = Net()
    start = {k: v.clone() for k, v in model.state_dict().items()}
    unaware = Net(pad_aware=False)
    unaware.load_state_dict(start)
    with torch.no_grad():
        first = [d['inputs'] for d in data[:2]]
        eager, plain = float(model(first)), float(unaware(first))
    assert abs(eager - plain) > 1e-4 * abs(eager)        # the padding matters here
    torch._dynamo.reset()
    runner = Runner(
        model=model, work_dir=str(tmp_path),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.1)),
        train_dataloader=dict(dataset=data, sampler=dict(type='DefaultSampler', shuffle=False),
                              batch_size=2, collate_fn=dict(type='pseudo_collate')),
        train_cfg=dict(by_epoch=False, max_iters=2),
        cfg=dict(compile=dict(backend='aot_eager', dynamic=True)),
        default_hooks=dict(checkpoint=None, logger=None), default_scope='mmengine',
        # A name of its own: the Runners of one name and second share one message hub.
        experiment_name='compile_padded')
    runner.train()
    losses = runner.message_hub.get_scalar('train/loss').data[0]
    assert len(losses) == 2, losses
    assert abs(losses[0] - eager) <= 1e-5 * abs(eager), (losses[0], eager, plain)
    assert any(not torch.equal(start[k], v) for k, v in model.state_dict().items())
