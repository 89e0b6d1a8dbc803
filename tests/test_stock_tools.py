"""OpenMMLab's own entry points on a shipped config, as a user runs them from the README:
``mim train`` / ``mim test`` (mmdet), and mmdet's ``analysis_tools/analyze_logs.py`` and
``browse_dataset.py`` from the scripts the mmdet wheel ships (``<mmdet>/.mim/tools``).
None of these imports ``inline_mm`` itself: the config's ``custom_imports`` must do it.

The config is the shipped demo config, shrunk only with ``--cfg-options`` (toy data in a
temporary folder, 2 iterations of 2 images), so the commands are the README's."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from inline_mm.toydata.coco import make_coco_toy

ROOT = Path(__file__).resolve().parents[1]
NANO = 'configs/inline_swin/mask-rcnn_inline-swin-nano_fpn_1xb4-600it_toy-coco.py'
TIMEOUT = 300

pytestmark = pytest.mark.slow


def mmdet_tool(rel: str) -> str:
    import mmdet
    path = Path(mmdet.__file__).parent / '.mim' / 'tools' / rel
    assert path.is_file(), f'{path} is missing from the mmdet wheel'
    return str(path)


def mim() -> list:
    exe = Path(sys.executable).with_name('mim')   # the console script, as the README runs it
    return [str(exe)] if exe.is_file() else [sys.executable, '-m', 'mim']


def run(cmd, timeout=TIMEOUT):
    env = dict(os.environ, OMP_NUM_THREADS='1', PYTHONUNBUFFERED='1')
    env['PYTHONPATH'] = str(ROOT) + os.pathsep + env.get('PYTHONPATH', '')
    proc = subprocess.run([str(c) for c in cmd], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, f'{" ".join(map(str, cmd))}\n{log[-4000:]}'
    return log


@pytest.fixture(scope='module')
def toy(tmp_path_factory):
    """Toy COCO data and the --cfg-options that point the demo config at it, small."""
    base = tmp_path_factory.mktemp('stock_tools')
    data = base / 'toy_coco'
    make_coco_toy(str(data), num_train=4, num_val=2, size=64, max_objects=2, seed=3)
    root = f'{data}/'
    ann = f'{root}annotations/instances_val2017.json'
    opts = [f'{split}_dataloader.{key}' for split in ('train', 'val', 'test')
            for key in ('num_workers=0', 'persistent_workers=False', 'batch_size=2',
                        f'dataset.data_root={root}')]
    opts += [f'val_evaluator.ann_file={ann}', f'test_evaluator.ann_file={ann}',
             'train_cfg.max_iters=2', 'default_hooks.logger.interval=1',
             'default_hooks.checkpoint.interval=2', 'log_processor.window_size=1']
    return dict(base=base, opts=opts)


@pytest.fixture(scope='module')
def mim_trained(toy):
    wd = toy['base'] / 'mim_train'
    log = run([*mim(), 'train', 'mmdet', NANO, '--gpus', '0', '--work-dir', wd,
               '--cfg-options', *toy['opts']])
    return dict(toy, wd=wd, log=log)


def test_mim_train(mim_trained):
    log, wd = mim_trained['log'], mim_trained['wd']
    assert re.findall(r'Iter\(train\) \[\s*(\d+)/', log) == ['1', '2'], log[-3000:]
    assert (wd / 'iter_2.pth').is_file()
    assert 'InLineSwin' in (wd / Path(NANO).name).read_text()     # the config it dumped


def test_mim_test(mim_trained):
    log = run([*mim(), 'test', 'mmdet', NANO, '--checkpoint', mim_trained['wd'] / 'iter_2.pth',
               '--gpus', '0', '--work-dir', mim_trained['base'] / 'mim_test',
               '--cfg-options', *mim_trained['opts']])
    for key in ('coco/bbox_mAP', 'coco/segm_mAP'):
        assert re.search(re.escape(key) + r': -?[\d.]+', log), log[-3000:]


def test_analyze_logs(mim_trained):
    logs = sorted(mim_trained['wd'].glob('*/vis_data/*.json'))
    assert logs, 'training wrote no json log'
    out = mim_trained['base'] / 'loss.png'
    run([sys.executable, mmdet_tool('analysis_tools/analyze_logs.py'), 'plot_curve', logs[-1],
         '--keys', 'loss', 'loss_cls', '--out', out])
    assert out.stat().st_size > 0
    log = run([sys.executable, mmdet_tool('analysis_tools/analyze_logs.py'), 'cal_train_time',
               logs[-1]])
    assert re.search(r'average iter time: [\d.]+ s/iter', log), log


def test_browse_dataset(toy):
    out = toy['base'] / 'browse'
    run([sys.executable, mmdet_tool('analysis_tools/browse_dataset.py'), NANO, '--not-show',
         '--output-dir', out, '--cfg-options', *toy['opts']])
    names = json.loads((toy['base'] / 'toy_coco/annotations/instances_train2017.json')
                       .read_text())['images']
    assert sorted(p.name for p in out.iterdir()) == sorted(i['file_name'] for i in names)
