"""inline_mm.analysis.complexity and its tool tools/analysis_tools/get_flops.py: what is counted,
and agreement with the backbone GMACs table of the project's reference notes
(shared/reference/ARCHITECTURES.md, kept beside the repository, not in it)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from inline_mm.analysis.complexity import count_macs, measure
from inline_mm.models import InLineAttention

ROOT = Path(__file__).resolve().parents[1]

NANO = 'configs/inline_swin/mask-rcnn_inline-swin-nano_fpn_1xb4-550it_toy-coco.py'


def test_flops_inline_attention_products_counted():
    """Every product of InLine attention is counted, including the two matmuls inside
    the function and the per-sample depthwise conv run through F.conv2d."""
    c, heads, (h, w) = 64, 2, (12, 20)
    n, d = h * w, c // heads
    attn = InLineAttention(c, heads).eval()
    x = torch.randn(3, n, c)
    _, cx = count_macs(attn, lambda: attn(x, (h, w)))
    per_sample = (n * c * 3 * c            # qkv
                  + heads * n * d * d      # K^T V
                  + heads * n * d * d      # Q (K^T V)
                  + n * c * 9              # predicted depthwise 3x3 on V
                  + c * (c // heads)       # residual.0 (grouped 1x1)
                  + 9 * c * (c // heads)   # residual.2 (grouped 1x1)
                  + n * c * c)             # proj
    # The implementation may add small terms (e.g. the mean(K)^T mean(V) outer product,
    # d x d per head) but nothing of the order of a token-wise product.
    assert 3 * per_sample <= cx.macs <= 3 * per_sample * 1.01
    # What a Linear/Conv module-hook counter would see: the rest is only visible at
    # the dispatcher (the function's matmuls and the functional depthwise conv).
    module_hook_view = 3 * (n * c * 3 * c + n * c * c + c * (c // heads) + 9 * c * (c // heads))
    assert cx.macs - module_hook_view >= 3 * (2 * heads * n * d * d + n * c * 9)
    assert cx.flops == 2 * cx.macs
    assert cx.module('qkv') == 3 * n * c * 3 * c
    assert cx.by_op['aten.convolution'] >= 3 * n * c * 9


# Backbone GMACs at 512x512 from shared/reference/ARCHITECTURES.md (official code, CPU).
TABLE_512 = {
    'configs/inline_swin/mask-rcnn_inline-swin-t_fpn_1x_coco.py': 24.2,
    'configs/inline_pvt/mask-rcnn_inline-pvt-t_fpn_1x_coco.py': 10.3,
}


@pytest.mark.parametrize('config,gmacs', sorted(TABLE_512.items()))
def test_flops_backbone_matches_table(config, gmacs):
    r = measure(str(ROOT / config), (512, 512), backbone_only=True)
    assert abs(r['macs'] / 1e9 - gmacs) / gmacs < 0.02, r['macs']
    assert r['params'] > 1e6


@pytest.mark.subprocess
def test_flops_cli_whole_detector_json():
    out = subprocess.run(
        [sys.executable, 'tools/analysis_tools/get_flops.py', NANO, '--shape', '128', '160',
         '--json'],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r['input'] == [1, 3, 128, 160]
    assert set(r['parts']) == {'backbone', 'neck', 'rpn_head', 'roi_head'}
    parts = r['parts']
    assert all(p['macs'] > 0 and p['params'] > 0 for p in parts.values())
    assert sum(p['macs'] for p in parts.values()) == r['macs']
    assert sum(p['params'] for p in parts.values()) == r['params']
    assert r['flops'] == 2 * r['macs']
    assert 0 < r['proposals'] <= 300 and 0 < r['mask_rois'] <= 100


def test_flops_cascade_detector(tmp_path):
    """A Cascade Mask R-CNN (shrunken): per-image lists out of its RoI head."""
    from mmengine.config import Config

    from support import shrink_detector
    cfg = Config.fromfile(
        str(ROOT / 'configs/inline_swin/cascade-mask-rcnn_inline-swin-t_fpn_1x_coco.py'))
    config = tmp_path / 'cascade.py'
    shrink_detector(cfg).dump(str(config))
    r = measure(str(config), (128, 160))
    assert r['parts']['roi_head']['macs'] > 0
    assert 0 < r['proposals'] <= 1000 and r['mask_rois'] == r['proposals']


@pytest.mark.subprocess
def test_flops_cli_rejects_bad_shape():
    out = subprocess.run([sys.executable, 'tools/analysis_tools/get_flops.py', NANO,
                          '--shape', '1', '2', '3'],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and '--shape takes H W' in out.stderr
