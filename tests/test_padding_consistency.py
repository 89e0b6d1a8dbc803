"""tools/analysis_tools/padding_consistency.py end to end on a tiny toy COCO set and a random-init
Mask R-CNN: an image alone and batched next to a larger one gets the same backbone
features with ``pad_aware=True`` and different ones with ``pad_aware=False``, and the
AP runs through the stock tools/test.py report box and mask AP (at test batch 2 only:
each run is a process start, most of the test's time)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import NANO_DET
from support import subprocess_env, write_toy_coco_config
from inline_mm.datasets.toy.coco import make_coco_toy

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.slow, pytest.mark.subprocess]


def tiny_config(base: Path) -> Path:
    """96 px toy images, a 16-wide InLine-Swin Mask R-CNN (the demo's, shrunk)."""
    data = base / 'data'
    make_coco_toy(str(data), num_train=1, num_val=3, size=96, max_objects=2, seed=1)
    return write_toy_coco_config(NANO_DET, base, data, 96)


def random_init_checkpoint(cfg_path: Path, out: Path) -> Path:
    import torch
    from mmdet.apis import init_detector
    model = init_detector(str(cfg_path), None, device='cpu')
    model.init_weights()
    torch.save({'state_dict': model.state_dict(), 'meta': {}}, out)
    return out


def test_padding_consistency_tool(tmp_path):
    cfg = tiny_config(tmp_path)
    ckpt = random_init_checkpoint(cfg, tmp_path / 'random.pth')
    out_dir = tmp_path / 'out'
    env = subprocess_env()
    run = subprocess.run(
        [sys.executable, 'tools/analysis_tools/padding_consistency.py', str(cfg), str(ckpt),
         '--num-images', '2', '--small-size', '96', '64', '--ap-batches', '2',
         '--out-dir', str(out_dir)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    log = run.stdout + run.stderr
    assert run.returncode == 0, log[-4000:]
    for heading in ('(a) 2 val images, each resized to 96x64', 'detections with score >= 0.05',
                    '(b) tools/test.py on the val set with 2 of 3 images resized to 96x64'):
        assert heading in log, log[-3000:]

    summary = json.loads((out_dir / 'padding_consistency.json').read_text())
    a = summary['alone_vs_batched']['results']
    assert a['True']['features']['backbone'] < 1e-5        # padding-aware: same features
    assert a['False']['features']['backbone'] > 1e-3       # before: padding changes them
    assert a['True']['alone_same_as_pad_aware_false']      # no padding: unchanged outputs
    # The neck still sees the padded area, but only through its 3x3 convs at the border.
    assert a['True']['features']['neck_inner'] < 1e-5
    assert max(a['True']['features']['neck_depth']) <= 1
    assert max(a['True']['features']['rpn_depth']) <= 2     # one more 3x3 conv
    props = a['True']['proposals']
    assert 0 < props['top_k'] and 0 <= props['top_k_padded'] <= props['top_k']
    for name in ('batched', 'anchors on image', 'alone proposals', 'batched proposals'):
        assert a['True']['detections']['0.05'][name]['images'] == 2
    ap = summary['ap_batch_1_vs_2']
    assert (ap['images'], ap['resized'], ap['mixed_batches']) == (3, 2, 1)
    assert set(ap['ap']) == {'False/2', 'True/2'}
    for run_ap in ap['ap'].values():
        assert set(run_ap) == {'coco/bbox_mAP', 'coco/segm_mAP'}
        assert all(-1 <= v <= 1 for v in run_ap.values())
