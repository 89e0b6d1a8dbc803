"""The stack itself: cheap import, environment report, mmdet and mmseg models on CPU,
and mmengine checkpoints (resume / load_from) on torch >= 2.6."""
import copy
import re
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
from support import out_channels, shrink_backbone

import inline_mm  # noqa: F401  (registers the backbones)

#: the tests' tiny InLine-Swin (16 to 128 channels) in the frameworks' own configs
SMALL_SWIN = shrink_backbone(dict(type='InLineSwin'))


@pytest.mark.subprocess
def test_import_is_cheap_and_needs_no_compiled_ops():
    # Registry.get() would import the frameworks' model zoos itself: look at module_dict.
    code = ('import sys, inline_mm\n'
            'from mmdet.registry import MODELS as D\n'
            'from mmseg.registry import MODELS as S\n'
            'heavy = [m for m in ("mmcv._ext", "mmdet.models", "mmseg.models") '
            'if m in sys.modules]\n'
            'print("heavy:", heavy)\n'
            'assert all(n in R.module_dict for R in (D, S) for n in inline_mm.FAMILIES)\n')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True)
    assert 'heavy: []' in out.stdout


@pytest.mark.subprocess
def test_env_report():
    out = subprocess.run([sys.executable, '-m', 'inline_mm.env'], capture_output=True, text=True,
                         check=True).stdout
    for name in ('Python', 'torch', 'mmcv ops', 'mmengine', 'mmdet', 'mmseg', 'timm', 'numpy'):
        assert f'{name}:' in out
    # which implementation backs mmcv's ops: mmcv-lite + torchvision (default) or compiled mmcv
    assert ('mmcv ops: inline_mm stand-in (mmcv without compiled ops' in out
            and 'sigmoid_focal_loss_forward' in out and 'ms_deform_attn_backward' in out) \
        or 'mmcv ops: compiled mmcv' in out
    assert 'registered: InLineSwin' in out
    assert re.search(r'CPU bf16: (yes|no) \(', out), out
    # the stack, and the patch table: on where this process switched it on (the import and
    # the interpreter-start hook), needed where the feature check says so (measured: upstream
    # mmengine 0.10.7 keeps torch's refusal and finds mmsegmentation; onedl 0.10.12 does neither)
    from inline_mm.patches import table as patches
    stack = out.split('OpenMMLab stack:')[1].split()[0]
    assert stack in ('upstream', 'onedl'), out
    state = dict(re.findall(r'^  (\w+) +(on|off|needed, off|switched off) ', out, re.M))
    assert list(state) == [p.name for p in patches()], out
    onedl = stack == 'onedl'
    assert state['mmseg_scope'] == ('on' if onedl else 'off'), out
    assert state['strict_checkpoint_loading'] == ('needed, off' if onedl else 'off'), out
    assert state['checkpoint_allowlist'] == 'on' and state['inline_mm_bases'] == 'on', out
    for engine_row in ('cpu_distributed', 'checkpoint_prune_order', 'resume_fallback'):
        assert state[engine_row] == 'needed, off', out


@pytest.mark.parametrize('flags, has', [
    ({'avx2', 'avx512f', 'avx512_bf16'}, True), ({'amx_bf16', 'amx_tile'}, True),
    ({'fp', 'asimd', 'bf16'}, True), ({'avx2', 'avx512f', 'avx512_vnni'}, False)])
def test_bf16_support_reads_the_cpu_flags(monkeypatch, flags, has):
    from inline_mm import env
    monkeypatch.setattr(env, '_cpu_flags', lambda: flags)
    found, why = env.bf16_support('cpu')
    assert found is has
    assert ('emulated' in why) is not has, why


def _build(tmp_path, base, backbone, neck_in):
    """The packaged config ``base`` (``mmdet::...``), with a small InLine backbone."""
    from mmengine.config import Config
    path = tmp_path / 'cfg.py'
    path.write_text(f"_base_ = '{base}'\n")
    cfg = Config.fromfile(str(path))
    cfg.model.backbone = backbone
    if neck_in is not None:
        cfg.model.neck.in_channels = neck_in
    return cfg


def _loss_step_then_predict(model, batch):
    """One loss and backward on ``batch`` (a finite loss), then the model's predictions on it."""
    model.init_weights()
    total, _ = model.parse_losses(model(**model.data_preprocessor(batch, True), mode='loss'))
    assert torch.isfinite(total)
    total.backward()
    model.eval()
    with torch.no_grad():
        return model(**model.data_preprocessor(batch, False), mode='predict')


def test_mmdet_mask_rcnn_loss_and_predict(tmp_path):
    from mmdet.registry import MODELS
    from mmdet.testing import demo_mm_inputs
    from mmdet.utils import register_all_modules
    register_all_modules()
    cfg = _build(tmp_path, 'mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py', SMALL_SWIN,
                 out_channels(SMALL_SWIN))
    packed = demo_mm_inputs(2, [[3, 96, 128], [3, 80, 112]], num_items=[2, 1], with_mask=True)
    results = _loss_step_then_predict(MODELS.build(cfg.model), packed)
    assert len(results) == 2 and hasattr(results[0], 'pred_instances')
    assert 'masks' in results[0].pred_instances


def test_mmseg_upernet_loss_and_predict(tmp_path):
    from mmengine.model import revert_sync_batchnorm
    from mmseg.registry import MODELS
    from mmseg.structures import SegDataSample
    from mmseg.utils import register_all_modules
    from mmengine.structures import PixelData
    register_all_modules()
    cfg = _build(
        tmp_path,
        'mmseg::swin/swin-tiny-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py',
        SMALL_SWIN, None)
    cfg.model.decode_head.in_channels = [16, 32, 64, 128]
    cfg.model.decode_head.channels = 32
    cfg.model.auxiliary_head.in_channels = 64
    cfg.model.auxiliary_head.channels = 16
    cfg.model.pop('pretrained', None)
    model = revert_sync_batchnorm(MODELS.build(cfg.model))
    inputs = [torch.randint(0, 255, (3, 64, 96), dtype=torch.uint8) for _ in range(2)]
    samples = []
    for _ in range(2):
        s = SegDataSample(metainfo=dict(img_shape=(64, 96), ori_shape=(64, 96), pad_shape=(64, 96)))
        s.gt_sem_seg = PixelData(data=torch.randint(0, 150, (1, 64, 96)))
        samples.append(s)
    out = _loss_step_then_predict(model, dict(inputs=inputs, data_samples=samples))
    assert out[0].pred_sem_seg.data.shape[-2:] == (64, 96)


from mmengine.model import BaseModel  # noqa: E402


class _ToyModel(BaseModel):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(2, 1)

    def forward(self, inputs, labels, mode='tensor'):
        out = self.linear(torch.stack(inputs))
        if mode == 'loss':
            return dict(loss=(out.squeeze(-1) - torch.stack(labels)).square().mean())
        return out


class _ToyData(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return dict(inputs=torch.tensor([float(i), 1.0]), labels=torch.tensor(float(i % 2)))


def _runner(work_dir, max_iters, **kw):
    from mmengine.runner import Runner
    return Runner(
        model=_ToyModel(), work_dir=str(work_dir),
        train_dataloader=dict(dataset=_ToyData(), sampler=dict(type='DefaultSampler', shuffle=True),
                              batch_size=2, num_workers=0),
        optim_wrapper=dict(optimizer=dict(type='AdamW', lr=0.01)),
        param_scheduler=dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=4),
        train_cfg=dict(by_epoch=False, max_iters=max_iters),
        default_hooks=dict(checkpoint=dict(type='CheckpointHook', interval=2, by_epoch=False),
                           logger=dict(type='LoggerHook', interval=1)),
        randomness=dict(seed=0), experiment_name=f'toy{max_iters}{len(kw)}', **kw)


@pytest.mark.subprocess
def test_mmengine_resume_and_load_from_with_safe_loading(tmp_path):
    """torch >= 2.6 loads with weights_only=True; mmengine's own checkpoints (message hub
    history, numpy scalars) must still resume, without turning safe loading off."""
    first = _runner(tmp_path, 2)
    first.train()
    ckpt = tmp_path / 'iter_2.pth'
    assert ckpt.exists()
    # The checkpoint really holds objects that plain torch.load (weights_only) refuses...
    plain = subprocess.run([sys.executable, '-c', f'import torch; torch.load({str(ckpt)!r})'],
                           capture_output=True, text=True)
    assert plain.returncode != 0 and 'HistoryBuffer' in plain.stderr
    # ...and yet resume works.
    resumed = _runner(tmp_path, 4, resume=True)
    resumed.train()
    assert resumed.iter == 4
    assert resumed.message_hub.get_info('iter') is not None
    loaded = _runner(tmp_path / 'b', 2, load_from=str(ckpt))
    loaded.train()
    assert loaded.iter == 2


def test_safe_loading_is_still_on_for_other_objects(tmp_path):
    path = tmp_path / 'evil.pth'
    torch.save({'x': torch.zeros(1), 'obj': copy.copy}, path)   # a callable: must be refused
    with pytest.raises(Exception, match='Weights only load failed'):
        torch.load(path)


class _SneakyGetattr:
    """Pickles as getattr(HistoryBuffer, '__init__'): the first step of a gadget chain."""

    def __reduce__(self):
        from mmengine.logging.history_buffer import HistoryBuffer
        return getattr, (HistoryBuffer, '__init__')


def test_getattr_allowlist_is_limited_to_history_buffer_statistics(tmp_path):
    path = tmp_path / 'sneaky.pth'
    torch.save({'x': _SneakyGetattr()}, path)
    with pytest.raises(Exception, match="refusing getattr"):
        torch.load(path)
