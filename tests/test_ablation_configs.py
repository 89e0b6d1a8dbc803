"""The ablation configs (configs/ablations/): the paper's switches on InLine-Swin-T for
Mask R-CNN 1x and UperNet 160k. Each is a short child of its main config that changes the
backbone's ``inline_cfg`` and nothing else, builds, and trains a step (shrunken, on CPU)."""
import copy
import functools
import re
from pathlib import Path

import pytest
import torch
from mmengine.config import Config
from mmengine.optim import build_optim_wrapper
from mmengine.registry import init_default_scope

from support import SEG_SIZE, shrink_detector, shrink_segmentor

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / 'configs' / 'ablations'
MAIN = {'det': ROOT / 'configs/inline_swin/mask-rcnn_inline-swin-t_fpn_1x_coco.py',
        'seg': ROOT / 'configs/inline_swin/'
                      'inline-swin-t-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py'}
NAME = {'det': re.compile(r'^mask-rcnn_inline-swin-t-(?P<tag>[\w-]+)_fpn_1x_coco\.py$'),
        'seg': re.compile(r'^inline-swin-t-(?P<tag>[\w-]+)-in1k-pre_upernet_8xb2-160k_'
                          r'ade20k-512x512\.py$')}
KERNELS = ('identity', 'relu', 'leakyrelu', 'exp')
#: the paper's groups: tag -> the inline_cfg it means
EXPECTED = {
    **{f'{kind}-{k}-nolocal': dict(attention=kind, kernel=k, local_residual=False)
       for kind in ('linear', 'inline') for k in KERNELS},           # injectivity
    **{f'inline-{k}': dict(kernel=k) for k in KERNELS[1:]},          # InLine-Swin-T's kernel
    **{f'inline-win{w}': dict(window_size=w) for w in (7, 14, 28, 56)},   # local modeling
}
CONFIGS = sorted(p for p in FOLDER.glob('*.py'))


def _task(path: Path):
    for task, pattern in NAME.items():
        m = pattern.match(path.name)
        if m:
            return task, m['tag']
    raise AssertionError(f'{path.name} follows neither naming pattern')


@functools.lru_cache(maxsize=None)
def _parse(path: Path) -> Config:
    return Config.fromfile(str(path))


def _load(path: Path) -> Config:
    cfg = copy.deepcopy(_parse(path))
    init_default_scope(cfg.default_scope)
    return cfg


def test_every_group_is_there_for_both_tasks():
    found = {}
    for path in CONFIGS:
        task, tag = _task(path)
        found.setdefault(task, set()).add(tag)
    assert found == {'det': set(EXPECTED), 'seg': set(EXPECTED)}


@pytest.mark.parametrize('path', CONFIGS, ids=lambda p: p.name)
def test_a_short_child_that_changes_only_the_switches(path):
    task, tag = _task(path)
    text = path.read_text()
    assert f"_base_ = '../inline_swin/{MAIN[task].name}'" in text
    header = ' '.join(line[2:] for line in text.splitlines() if line.startswith('# '))
    # says what it starts from, and that its numbers are not the paper's
    assert "Starts from InLine-Swin-T's ImageNet-1K file" in header
    assert 'do not compare' in header and 'init_cfg=None' in header
    cfg, main = _parse(path), _parse(MAIN[task])
    assert cfg.model.backbone.inline_cfg == EXPECTED[tag]
    model = cfg.model.to_dict()
    del model['backbone']['inline_cfg']
    assert model == main.model.to_dict()
    assert {k: v for k, v in cfg.items() if k != 'model'} == \
        {k: v for k, v in main.items() if k != 'model'}
    # starts from InLine-Swin-T's ImageNet file, as the header says
    assert cfg.model.backbone.init_cfg.checkpoint == 'inline://swin_t'


def _seg_batch(num_classes):
    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample
    samples = []
    for _ in range(2):
        s = SegDataSample(gt_sem_seg=PixelData(
            data=torch.randint(0, num_classes, (1, SEG_SIZE, SEG_SIZE))))
        s.set_metainfo(dict(img_shape=(SEG_SIZE, SEG_SIZE), ori_shape=(SEG_SIZE, SEG_SIZE),
                            pad_shape=(SEG_SIZE, SEG_SIZE)))
        samples.append(s)
    inputs = [torch.randint(0, 256, (3, SEG_SIZE, SEG_SIZE), dtype=torch.uint8)
              for _ in range(2)]
    return dict(inputs=inputs, data_samples=samples)


def _det_batch(num_classes):
    from mmdet.testing import demo_mm_inputs
    # two images of different sizes: a padded batch, as mmdet makes it
    return demo_mm_inputs(2, [[3, 64, 96], [3, 80, 64]], num_items=[2, 1], with_mask=True,
                          num_classes=num_classes)


@pytest.mark.parametrize('path', CONFIGS, ids=lambda p: p.name)
def test_ablation_trains_a_step(path):
    """The shrunken model (the switches kept) takes one optimiser step with finite loss and
    gradients, and the switch is in the built backbone's InLine attentions."""
    task, tag = _task(path)
    cfg = _load(path)
    if task == 'det':
        from mmdet.registry import MODELS
        shrink_detector(cfg)
        num_classes = cfg.model.roi_head.bbox_head.num_classes
        batch = _det_batch(num_classes)
    else:
        from mmseg.registry import MODELS
        shrink_segmentor(cfg)
        batch = _seg_batch(cfg.model.decode_head.num_classes)
    torch.manual_seed(0)
    model = MODELS.build(cfg.model)
    model.init_weights()
    model.train()
    switches = cfg.model.backbone.inline_cfg
    attns = [m for m in model.backbone.modules() if hasattr(m, 'local_residual')]
    assert attns, 'no InLine attention in the backbone'
    for attn in attns:
        assert attn.attention == switches.get('attention', 'inline')
        assert attn.kernel == switches.get('kernel', 'identity')
        assert attn.local_residual == switches.get('local_residual', True)
        assert (getattr(attn, 'residual', None) is not None) == attn.local_residual
        assert attn.window_size == switches.get('window_size')
    optim = build_optim_wrapper(model, cfg.optim_wrapper)
    before = [p.detach().clone() for p in model.backbone.parameters()]
    log = model.train_step(batch, optim)
    assert all(torch.isfinite(v).all() for v in log.values()), log
    grads = [p.grad for p in model.backbone.parameters() if p.requires_grad]
    assert grads and all(g is None or torch.isfinite(g).all() for g in grads)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.backbone.parameters()))
