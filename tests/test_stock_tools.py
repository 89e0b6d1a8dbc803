"""The detection commands of the README and docs/ (detection.md, model_size.md), run as
written on toy data: ``tools/train.py`` / ``tools/test.py``, OpenMMLab's ``mim train``
(pytorch launcher, 2 CPU processes) and ``mim test``, and mmdet's own
``analysis_tools/analyze_logs.py`` and ``browse_dataset.py`` from the scripts the mmdet wheel
ships (``<mmdet>/.mim/tools``; none of these imports ``inline_mm`` itself: the config's
``custom_imports`` must do it).

The config is the one those pages train (``mask-rcnn_inline-swin-t_fpn_1x_coco.py``), shrunk
only with ``--cfg-options``: toy COCO in a temporary folder, 128-pixel images, random backbone
weights (no download), one epoch of 2 iterations."""
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from support import free_port, subprocess_env

from inline_mm.env import stack_name
from inline_mm.datasets.toy.coco import make_coco_toy

ROOT = Path(__file__).resolve().parents[1]
#: the README and docs/ in one text: the commands below are looked up wherever they are written
README = '\n'.join(p.read_text()
                   for p in [ROOT / 'README.md', *sorted((ROOT / 'docs').glob('*.md'))])
TIMEOUT = 400

# One worker for the module: its tests share two training runs (module fixtures).
pytestmark = [pytest.mark.slow, pytest.mark.subprocess, pytest.mark.xdist_group('stock_tools')]


def readme_line(start: str) -> list:
    """The first documented command line that starts with ``start``, as a list of words."""
    text = re.sub(r'\\\n\s*', ' ', README)
    found = [line.split('#')[0].strip() for line in text.splitlines()
             if line.strip().startswith(start)]
    assert found, f'README.md and docs/ have no command starting with {start!r}'
    return shlex.split(found[0])


CONFIG = readme_line('python tools/train.py configs/inline_swin/mask-rcnn')[2]


def mim() -> str:
    exe = Path(sys.executable).with_name('mim')   # the console script, as the README runs it
    assert exe.is_file(), f'{exe} missing: the set-up installs openmim'
    return str(exe)


def mim_codebase(name: str) -> str:
    """The codebase argument for this mim: the documented one (``mmdet``) where mim resolves
    it (openmim); onedl-mim finds ``mmdet`` ambiguous (onedl-mmdetection, mmdet3d) and takes
    the distribution that provides the package instead (docs/get_started.md, "The onedl
    stack")."""
    import importlib.metadata as md

    from mim.utils import module_full_name
    if module_full_name(name):
        return name
    return md.packages_distributions().get(name, [name])[0]


def run(cmd, timeout=TIMEOUT):
    cmd = [str(c) for c in cmd]
    if cmd[0] == 'mim' and len(cmd) > 2 and cmd[1] in ('train', 'test', 'run'):
        cmd[2] = mim_codebase(cmd[2])
    cmd = [sys.executable if c == 'python' else mim() if c == 'mim' else c for c in cmd]
    proc = subprocess.run(cmd, cwd=ROOT, env=subprocess_env(), capture_output=True, text=True,
                          timeout=timeout)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, f'{" ".join(cmd)}\n{log[-4000:]}'
    return log


def _resize_options(pipeline, loader: str, key: str = '') -> list:
    """The --cfg-options that make every resize of a loader's pipeline 128 px, in the
    branches of a RandomChoice (the multi-scale + crop augmentation) too."""
    key = key or f'{loader}.dataset.pipeline'
    opts = []
    for i, step in enumerate(pipeline):
        if step['type'] == 'Resize':
            opts.append(f'{key}.{i}.scale=(128,128)')
        elif step['type'] == 'RandomChoiceResize':
            opts.append(f'{key}.{i}.scales=[(128,128)]')
        elif step['type'] == 'RandomChoice':
            for j, branch in enumerate(step['transforms']):
                opts += _resize_options(branch, loader, f'{key}.{i}.transforms.{j}')
    if key.endswith('.pipeline'):
        assert opts, f'no resize step in the {loader} pipeline'
    return opts


@pytest.fixture(scope='module')
def toy(tmp_path_factory):
    """Toy COCO data and the --cfg-options that point the README config at it, small."""
    from mmengine.config import Config
    cfg = Config.fromfile(str(ROOT / CONFIG))
    # Which pipeline steps resize (fail here, clearly, if the bases change).
    resize = (_resize_options(cfg.train_dataloader.dataset.pipeline, 'train_dataloader')
              + _resize_options(cfg.test_dataloader.dataset.pipeline, 'test_dataloader'))
    base = tmp_path_factory.mktemp('stock_tools')
    data = base / 'toy_coco'
    make_coco_toy(str(data), num_train=4, num_val=2, size=64, max_objects=2, seed=3)
    root = f'{data}/'
    ann = f'{root}annotations/instances_val2017.json'
    # No validation inside training (the test commands evaluate): less to wait for.
    opts = ['val_cfg=None', 'val_dataloader=None', 'val_evaluator=None']
    opts += [f'{split}_dataloader.{key}' for split in ('train', 'test')
             for key in ('num_workers=0', 'persistent_workers=False', 'batch_size=2',
                         f'dataset.data_root={root}',
                         'dataset.metainfo.classes=(circle,triangle,rectangle)')]
    opts += resize + [
        f'test_evaluator.ann_file={ann}',
        'model.roi_head.bbox_head.num_classes=3', 'model.roi_head.mask_head.num_classes=3',
        'model.backbone.init_cfg=None', 'train_cfg.max_epochs=1',
        'default_hooks.logger.interval=1', 'log_processor.window_size=1']
    return dict(base=base, opts=opts)


def logged_iters(log):
    return re.findall(r'Epoch\(train\)\s+\[1\]\[\s*(\d+)/', log)


def assert_box_and_mask_map(log):
    for key in ('coco/bbox_mAP', 'coco/segm_mAP'):
        assert re.search(re.escape(key) + r': -?[\d.]+', log), log[-3000:]


@pytest.fixture(scope='module')
def trained(toy):
    """README: python tools/train.py CONFIG."""
    wd = toy['base'] / 'train'
    log = run([*readme_line('python tools/train.py configs/inline_swin/mask-rcnn'),
               '--work-dir', wd, '--cfg-options', *toy['opts']])
    return dict(toy, wd=wd, log=log)


def test_readme_train(trained):
    assert logged_iters(trained['log']) == ['1', '2'], trained['log'][-3000:]
    assert (trained['wd'] / 'epoch_1.pth').is_file()


@pytest.fixture(scope='module')
def mim_trained(toy):
    """README: mim train mmdet CONFIG --gpus 8 --launcher pytorch, with 2 CPU processes."""
    words = readme_line('mim train mmdet')
    assert words[words.index('--gpus') + 1] == '8' and '--launcher' in words
    words[words.index('--gpus') + 1] = '2'
    wd = toy['base'] / 'mim_train'
    log = run([*words, '--port', free_port(), '--work-dir', wd, '--cfg-options', *toy['opts']])
    assert 'torch.distributed' in log and 'Distributed training: True' in log, log[-3000:]
    assert logged_iters(log) == ['1'], log[-3000:]    # 4 images over 2 processes x 2
    assert (wd / 'epoch_1.pth').is_file()
    return dict(toy, wd=wd)


def test_mim_test(mim_trained):
    words = readme_line('mim test')
    words[words.index('CKPT')] = str(mim_trained['wd'] / 'epoch_1.pth')
    log = run([*words, '--work-dir', mim_trained['base'] / 'mim_test',
               '--cfg-options', *mim_trained['opts']])
    assert_box_and_mask_map(log)


def readme_placeholders(words, **values):
    return [values.get(w, w) for w in words]


def test_analyze_logs(trained):
    """README: mim run mmdet analyze_logs plot_curve / cal_train_time LOG.json ..."""
    logs = sorted(trained['wd'].glob('*/vis_data/*.json'))
    assert logs, 'training wrote no json log'
    out = trained['base'] / 'loss.png'
    words = readme_placeholders(readme_line('mim run mmdet analyze_logs plot_curve'),
                                LOG=logs[-1], **{'loss.png': out})
    if stack_name() == 'onedl':
        # onedl-mmdetection 3.5.1's script passes its default style, seaborn's 'dark', to
        # matplotlib, which has no such style: it fails as docs/get_started.md says, and runs
        # with the style named there.
        with pytest.raises(AssertionError, match="'dark' is not a valid package style"):
            run(words)
        assert '`--style default`' in README
        words += ['--style', 'default']
    log = run(words)
    assert '.mim/tools/analysis_tools/analyze_logs.py' in log, log
    assert out.stat().st_size > 0
    log = run(readme_placeholders(readme_line('mim run mmdet analyze_logs cal_train_time'),
                                  LOG=logs[-1]))
    assert re.search(r'average iter time: [\d.]+ s/iter', log), log


def test_browse_dataset(toy):
    """README: mim run mmdet browse_dataset CONFIG --not-show --output-dir DIR."""
    words = readme_line('mim run mmdet browse_dataset')
    out = toy['base'] / 'browse'
    words[words.index('--output-dir') + 1] = str(out)
    log = run([*readme_placeholders(words, CONFIG=CONFIG), '--cfg-options', *toy['opts']])
    assert '.mim/tools/analysis_tools/browse_dataset.py' in log, log
    names = json.loads((toy['base'] / 'toy_coco/annotations/instances_train2017.json')
                       .read_text())['images']
    assert sorted(p.name for p in out.iterdir()) == sorted(i['file_name'] for i in names)


def test_mim_get_flops_on_toy_coco(tmp_path):
    """README: the toy set, then mmdet's stock counter on the shipped config, as written
    (data/toy_coco made in a temporary folder instead)."""
    data = tmp_path / 'toy_coco'

    def here(words):
        return [w.replace('data/toy_coco', str(data)) for w in words]

    run(here(readme_line('python tools/misc/make_toy_dataset.py coco data/toy_coco')))
    log = run(here(readme_line('mim run mmdet get_flops')))
    printed = r'Input shape: \(800, 800\)\nFlops: [\d.]+T\nParams: 48\.73M'
    assert re.search(printed, log), log[-2000:]


def test_mim_mmseg_get_flops_fails_as_documented():
    """docs/model_size.md sends segmentation users to tools/analysis_tools/get_flops.py because the
    stock mmseg script cannot run with upstream mmengine 0.10.7; once it can, the page must
    change. With onedl-mmengine 0.10.12 it runs, as the page says too."""
    config = ROOT / 'configs/inline_swin/inline-swin-t-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py'
    assert '"input_shape" and "inputs" cannot be both set' in README
    cmd = ['mim', 'run', 'mmseg', 'get_flops', config, '--shape', '64', '64',
           '--cfg-options', 'model.backbone.init_cfg=None']
    if stack_name() == 'onedl':
        assert 'On the onedl stack it runs' in README
        assert re.search(r'Flops: [\d.]+G', run(cmd))
        return
    with pytest.raises(AssertionError, match='"input_shape" and "inputs" cannot be both set'):
        run(cmd)
