"""Mixed precision: the InLine attention stays finite under bf16/fp16 autocast at ~100k
tokens with large activations, the shipped AMP config trains, and a non-finite loss is
reported with its iteration and module (NonFiniteCheckHook).

mmengine's ``AmpOptimWrapper`` refuses to start without a GPU, and its CPU autocast is
bf16 only. On CPU the AMP config is therefore trained with that one check lifted (bf16
autocast, the GradScaler disabled as torch does without CUDA); the fp16 + GradScaler run
of the same config is a CUDA test, skipped here. RoIAlign runs bf16 in fp32 (the stand-in
of mmcv's ops, or the patch row ``mmcv_ops_bf16`` with compiled mmcv).
"""
import pytest
import torch
from mmengine.config import Config
from mmengine.optim.optimizer import amp_optimizer_wrapper
from mmengine.runner import Runner

from conftest import rel_err
from inline_mm.engine import NonFiniteCheckHook, NonFiniteLossError
from inline_mm.engine.nonfinite import first_nonfinite_module
from inline_mm.models import InLineCSwin, InLinePVT, InLineSwin
from inline_mm.models.attention import InLineAttention
from reliability_support import tiny_config, toy_ade, toy_coco

LOW = [torch.bfloat16, torch.float16]
NAN_HOOK = "custom_hooks = [dict(type='NonFiniteCheckHook')]\n"
#: ~100k tokens: stage 1 of a 1264x1264 image (316 x 316)
LONG_HW = (250, 400)


def _naive_kv_sum(attn, x):
    """K^T V summed in the autocast dtype, as a plain implementation would."""
    k, v = attn.qkv(x).chunk(3, dim=-1)[1:]
    return k.transpose(-2, -1) @ v


@pytest.mark.parametrize('dtype', LOW, ids=['bf16', 'fp16'])
def test_attention_long_sequence_large_activations(dtype):
    torch.manual_seed(0)
    attn = InLineAttention(32, 2)
    with torch.no_grad():
        attn.qkv.bias.fill_(20.)        # large, same-sign keys and values
    n = LONG_HW[0] * LONG_HW[1]
    x = torch.randn(1, n, 32) * 10
    # The gradient of a mean loss over the n tokens, times a loss scale of 2**10 as AMP's
    # GradScaler applies (unscaled fp16 gradients of ~1/n would be subnormal).
    g = torch.randn(1, n, 32) * (2 ** 10 / n)
    ref_attn = InLineAttention(32, 2).double()
    ref_attn.load_state_dict(attn.state_dict())
    xr = x.double().requires_grad_()
    ref = ref_attn(xr, LONG_HW)
    ref.backward(g.double())

    xl = x.clone().requires_grad_()
    with torch.autocast('cpu', dtype=dtype):
        out = attn(xl, LONG_HW)
        naive = _naive_kv_sum(attn, x)
    assert out.dtype == dtype
    assert ref.abs().max() < 6e4              # the true result fits fp16 ...
    if dtype == torch.float16:                # ... but summing K^T V in fp16 does not
        assert not torch.isfinite(naive).all()
    out.float().backward(g)
    assert torch.isfinite(out).all() and torch.isfinite(xl.grad).all()
    assert rel_err(out, ref) < 3e-2
    assert rel_err(xl.grad, xr.grad) < 5e-2
    for (name, p), q in zip(attn.named_parameters(), ref_attn.parameters()):
        assert torch.isfinite(p.grad).all(), name
        # Not compared: the qkv bias gradient sums 100k per-token bf16/fp16 gradients
        # whose exact sum nearly cancels (for K exactly: the output ignores a shift of
        # K), so it carries the rounding noise of any layer under autocast.
        if name != 'qkv.bias':
            assert rel_err(p.grad, q.grad) < 5e-2, name


BACKBONES = {
    'swin': (InLineSwin, dict(embed_dims=16, depths=(1, 1, 1, 1), num_heads=(1, 1, 2, 2))),
    'pvt': (InLinePVT, dict(embed_dims=(16, 32, 48, 64), depths=(1, 1, 1, 1),
                            num_heads=(1, 2, 3, 4))),
    'cswin': (InLineCSwin, dict(embed_dims=16, depths=(1, 1, 1, 1), num_heads=(2, 2, 4, 8))),
}


@pytest.mark.parametrize('hw, dtypes', [((1264, 1264), [torch.float16]),
                                        ((1024, 2048), [torch.float16, torch.bfloat16])],
                         ids=['1264x1264', 'cityscapes'])
@pytest.mark.parametrize('name', sorted(BACKBONES))
def test_backbone_low_precision_autocast_high_resolution(name, hw, dtypes):
    """An image scaled x100 under fp16 autocast: 1264x1264 (~100k tokens in stage 1) and a
    whole Cityscapes image, 1024x2048 (131k tokens, a 256x512 map), as the Cityscapes
    configs test it; that one in bf16 too (the bf16 AMP configs)."""
    cls, kw = BACKBONES[name]
    torch.manual_seed(0)
    model = cls(**kw, drop_path_rate=0.).eval()
    x = torch.randn(1, 3, *hw) * 100
    with torch.no_grad():
        ref = model(x)
        for dtype in dtypes:
            with torch.autocast('cpu', dtype=dtype):
                low = model(x)
            for a, b in zip(low, ref):
                assert a.dtype in (dtype, torch.float32)
                assert torch.isfinite(a).all()
                assert rel_err(a, b) < 3e-2, dtype


# ------------------------------------------------------------------ training with AMP
@pytest.fixture(scope='module')
def ade(tmp_path_factory):
    return toy_ade(tmp_path_factory.mktemp('ade'), num_train=8)


@pytest.fixture(scope='module')
def coco(tmp_path_factory):
    return toy_coco(tmp_path_factory.mktemp('coco'), num_train=8)


def _runner(cfg_path, work_dir, data_root, name, **overrides) -> Runner:
    cfg = Config.fromfile(str(cfg_path))
    cfg.work_dir = str(work_dir)
    cfg.experiment_name = name
    cfg.train_dataloader.dataset.data_root = str(data_root)
    cfg.merge_from_dict(overrides)
    return Runner.from_cfg(cfg)


def test_amp_optim_wrapper_refuses_cpu(ade, tmp_path):
    if torch.cuda.is_available():
        pytest.skip('documents the CPU-only behaviour')
    cfg = tiny_config(tmp_path, 'upernet_amp')
    runner = _runner(cfg, tmp_path / 'work', ade, 'amp_refused')
    with pytest.raises(AssertionError, match='only available training on gpu'):
        runner.train()


@pytest.mark.parametrize('shipped', [
    'upernet_amp',
    'upernet_bf16',
    'mask_rcnn_amp',
])
def test_shipped_amp_config_trains_without_nonfinite_values(shipped, ade, coco, tmp_path,
                                                            monkeypatch):
    """A shipped AMP config (UperNet fp16 and bf16, Mask R-CNN), shrunk, 4 iterations under
    autocast (CPU: bf16) with NonFiniteCheckHook on: every loss finite, weights finite and
    updated, the attention computed in the config's low precision. (The other families, and
    evaluation in low precision: tests/test_amp_recipes.py.)"""
    if not torch.cuda.is_available():
        monkeypatch.setattr(amp_optimizer_wrapper, 'is_cuda_available', lambda: True)
    kind = shipped.rsplit('_', 1)[0]
    cfg = tiny_config(tmp_path, shipped, body=kind, extra=NAN_HOOK)
    data = ade if kind == 'upernet' else coco
    runner = _runner(cfg, tmp_path / 'work', data, shipped, **{'train_cfg.max_iters': 4})
    model = runner.model
    dtypes = []
    attn = next(m for m in model.modules() if isinstance(m, InLineAttention))
    attn.register_forward_hook(lambda m, i, o: dtypes.append(o.dtype))
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    runner.train()
    assert type(runner.optim_wrapper).__name__ == 'AmpOptimWrapper'
    assert any(isinstance(h, NonFiniteCheckHook) for h in runner.hooks)
    bf16 = shipped.endswith('bf16') or not torch.cuda.is_available()
    assert runner.optim_wrapper.cast_dtype == (torch.bfloat16 if shipped.endswith('bf16')
                                               else None)
    assert dtypes and set(dtypes) == {torch.bfloat16 if bf16 else torch.float16}
    losses = runner.message_hub.get_scalar('train/loss').data[0]
    assert len(losses) == 4 and all(torch.isfinite(torch.tensor(losses)))
    after = model.state_dict()
    assert all(torch.isfinite(v).all() for v in after.values() if v.is_floating_point())
    assert any(not torch.equal(before[k], after[k]) for k in before if k.startswith('backbone'))


# ------------------------------------------------------------------ NonFiniteCheckHook
def test_nonfinite_loss_names_iteration_and_module(ade, tmp_path):
    """A NaN injected into one attention block's output at iteration 3: the run stops
    there, before the optimizer step, naming the iteration and that block."""
    cfg = tiny_config(tmp_path, 'upernet',
                      extra=NAN_HOOK + 'default_hooks = dict(checkpoint=dict(interval=2))\n')
    runner = _runner(cfg, tmp_path / 'work', ade, 'nan_injected', **{'train_cfg.max_iters': 5})
    model = runner.model
    name, block = next((n, m) for n, m in model.named_modules()
                       if isinstance(m, InLineAttention) and n.startswith('backbone.layers.1'))
    snapshot = {}

    def inject(module, inputs, output):
        if runner.iter == 2:            # the third iteration, as logged
            if not snapshot:
                snapshot.update({k: p.detach().clone() for k, p in model.named_parameters()})
            return output * float('nan')
        return output

    block.register_forward_hook(inject)
    with pytest.raises(NonFiniteLossError) as err:
        runner.train()
    message = str(err.value)
    assert 'non-finite loss at iteration 3' in message
    assert f"module '{name}' (InLineAttention)" in message
    assert 'its inputs were finite' in message
    assert 'decode.loss_ce=nan' in message
    # No optimizer step with the NaN loss: the weights are those of iteration 2.
    assert all(torch.equal(snapshot[k], p) for k, p in model.named_parameters())
    assert (tmp_path / 'work' / 'iter_2.pth').is_file()


def test_nonfinite_hook_costs_no_extra_forward(ade, tmp_path):
    """With finite losses the hook never re-runs anything: one forward per iteration."""
    cfg = tiny_config(tmp_path, 'upernet', extra=NAN_HOOK)
    runner = _runner(cfg, tmp_path / 'work', ade, 'nan_cost', **{'train_cfg.max_iters': 2})
    calls = []
    runner.model.backbone.register_forward_hook(lambda *a: calls.append(1))
    runner.train()
    assert len(calls) == 2


def test_first_nonfinite_module_unit():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Sequential(torch.nn.Linear(4, 4)),
                                torch.nn.ReLU())
    with torch.no_grad():
        model[1][0].weight[0, 0] = float('inf')
    name, module, facts = first_nonfinite_module(model, (torch.randn(2, 4),), {})
    assert name == '1.0' and facts['inputs_finite'] and not facts['params_finite']
    model[1][0].weight.data.fill_(0.1)
    assert first_nonfinite_module(model, (torch.randn(2, 4),), {})[0] is None


def test_nonfinite_hook_rejects_bad_interval():
    with pytest.raises(ValueError, match='interval must be a positive integer'):
        NonFiniteCheckHook(interval=0)
