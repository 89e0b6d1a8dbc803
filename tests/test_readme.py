"""The commands of README.md and docs/*.md, as written, so that the text cannot drift from
the code.

- Every command of those pages (``bash`` blocks and inline commands) is listed in
  ``COVERED`` with the test that runs it, or why no test can (a GPU, the network, a compile,
  a 30-minute benchmark); a new command without an entry fails here.
- The fine-tuning walkthrough (docs/own_data.md) runs in document order, command by command,
  in a scratch folder laid out like the repository (``tools/``, ``configs/``), on the toy set,
  with the page's rehearsal edits (random weights, short schedule), and must learn: the loss
  falls and val mIoU ends clearly above what predicting the most frequent class everywhere
  gets.
- The segmentation lines (docs/segmentation.md) run on the toy ADE20K set (``--cfg-options``,
  one iteration).
- Multi-GPU, multi-node and Slurm lines (docs/detection.md) run with stand-ins for ``python``
  and ``srun`` that record their arguments (nothing is launched; the multi-node address is
  replaced by 127.0.0.1), which are then parsed with torchrun's and the stock scripts' own
  parsers.
"""
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
#: the pages whose commands are covered: the README and every page of docs/
PAGES = [ROOT / 'README.md', *sorted((ROOT / 'docs').glob('*.md'))]
TIMEOUT = 600

#: (pattern of a documented command, the test that runs it or why none can)
COVERED = [
    (r'make demo|\.venv/bin/python tools/demo\.py',
     'the demo itself (20-35 min on 2 cores: run by hand for the figures of '
     'docs/get_started.md); its data check: '
     'tests/test_detection_tools.py::test_demo_data_stamp_detects_other_generators'),
    (r'python tools/demo\.py', 'the same command as `make demo` runs, above'),
    (r'(INLINE_MM_RECORD_OPS=\S+ )?make test(-fast)?', 'the test suite itself'),
    (r'make setup|bash tools/dev/setup_env\.sh|pip install -e \.|pip uninstall mmcv'
     r'|pip install --no-deps openmim|pip install click .*',
     'environment set-up: .ci/run builds it from nothing and runs the suite'),
    (r'pip install "inline_mm\[mm\] @ git\+<repo-url>"',
     'the wheel test builds the wheel, installs it into a fresh environment and trains the '
     'toy config from another directory (lands with issue #26)'),
    (r'mim (train|test) +inline_mm .*',
     'the wheel test runs the shipped configs from the installed .mim folder (lands with '
     'issue #26); the same scripts through mmdet: tests/test_stock_tools.py::test_mim_test'),
    (r'pip install openmim', 'the page names it as what not to run'),
    (r'INLINE_MM_MMCV=full make setup', 'compiles mmcv (15-40 min); not a suite step'),
    (r'INLINE_MM_STACK=onedl make setup|make (setup|test|env)-onedl'
     r'|\.venv-onedl/bin/python -m inline_mm\.env',
     '.ci/run builds .venv-onedl from nothing and runs make test-onedl; the env report on either '
     'stack: tests/test_foundation.py::test_env_report'),
    (r'INLINE_MM_STACK=onedl make test',
     'the whole suite on the onedl stack (run by hand; docs/get_started.md records the result); '
     'CI runs its stack subset, make test-onedl'),
    (r'\.venv-onedl/bin/pip download .*onedl-mmcv==\S+|tar -xzf /tmp/onedl-mmcv/.*'
     r'|sed -i .*onedl-mmcv.*setup\.py|MMCV_WITH_OPS=1 \.venv-onedl/bin/pip install .*onedl-mmcv.*',
     'compiles onedl-mmcv with its ops (~30 min on 2 cores); checked once by hand '
     '(docs/get_started.md records it), not in CI'),
    (r'bash tools/dev/gpu/(prepare_wheels|cuda_check)\.sh',
     'needs the network (prepare_wheels) or a GPU machine (cuda_check)'),
    (r'python validate\.py /data/imagenet/val --model inline_\w+ --pretrained',
     "timm's validation script on ImageNet (not in this project; needs the images and the "
     'official files); the model, cfg and transform it uses: tests/test_timm.py'),
    (r'python tools/dev/run_timm_model_tests\.py /path/to/pytorch-image-models( -k .*)?',
     "needs a checkout of timm's repository (its tests are not in the wheel); the runner's "
     'changes to the file: '
     'tests/test_timm.py::test_timm_test_runner_files_our_models_as_timm_does'),
    (r'make env|(\.venv/bin/)?python -m inline_mm\.env',
     'tests/test_foundation.py::test_env_report'),
    (r'mim train inline_mm',
     'the onedl stack section says it fails with onedl-mim; tests/test_wheel.py checks that '
     'and the way round it: tests/test_wheel.py::'
     'test_installed_wheel_trains_the_toy_config_from_a_user_folder'),
    (r'mim train onedl-mmdetection CONFIG',
     'on the onedl stack tests/test_stock_tools.py runs the documented `mim train mmdet` '
     'lines with the codebase onedl-mim resolves, onedl-mmdetection: '
     'tests/test_stock_tools.py::test_mim_test'),
    (r'mim train',
     'a prose mention of the mim lines below: tests/test_stock_tools.py::test_mim_test'),
    (r'pip install onnx onnxruntime',
     'installed by the set-up (dev extra); the export tests use them'),
    (r'python tools/deployment/export_onnx\.py( .*)?',
     'the same tool on the smoke presets (no ImageNet files here), onnxruntime parity and a '
     'wrong size refused: tests/test_export.py::test_export_tool, '
     'tests/test_export.py::test_onnx_matches_pytorch_at_each_exported_size'),
    (r'python tools/misc/make_toy_dataset\.py coco data/toy_coco .*|mim run mmdet get_flops( .*)?',
     'tests/test_stock_tools.py::test_mim_get_flops_on_toy_coco'),
    (r'mim run mmseg get_flops',
     'the page says it fails with this mmengine: '
     'tests/test_stock_tools.py::test_mim_mmseg_get_flops_fails_as_documented'),
    (r'(\.venv/bin/)?python -m _inline_mm_mmcv_hook (install|uninstall|status)',
     'tests/test_mmcv_fallback.py::test_hook_command_installs_and_removes_its_pth'),
    (r'python -m inline_mm\.weights( (list|fetch swin_t|verify|path swin_t))?',
     'the same subcommands against a mirror on 127.0.0.1 (no test reaches the real host): '
     'tests/test_weights.py::test_cli_list_fetch_path_verify, '
     'tests/test_weights.py::test_cli_runs_as_a_module'),
    (r'python tools/model_converters/convert_checkpoint\.py( .*)?',
     'tests/test_checkpoint.py::test_convert_tool_writes_tensors_only_file'),
    (r'python tools/analysis_tools/get_flops\.py .*',
     'tests/test_flops.py::test_flops_cli_whole_detector_json'),
    (r'python tools/misc/check_dataset\.py|python tools/dataset_converters/convert_masks\.py'
     r'|python tools/misc/make_toy_dataset\.py',
     'the checkout paths beside their console scripts; each runs with arguments in '
     'tests/test_readme.py::test_finetune_walkthrough_as_written'),
    (r'python -m benchmarks --quick',
     'tests/test_benchmark.py::test_quick_run_writes_table_csv_and_plot'),
    (r'(OMP_NUM_THREADS=1 )?python -m benchmarks( --attention)?',
     'the full benchmark takes 30+ min; the same tool and code path run with --quick in '
     'tests/test_benchmark.py::test_quick_run_writes_table_csv_and_plot'),
    (r'python -m benchmarks --resolution --quick',
     'tests/test_benchmark_resolution.py::'
     'test_quick_run_measures_backbones_and_segmentors_and_writes_csv_and_plot'),
    (r'(OMP_NUM_THREADS=1 )?python -m benchmarks --resolution( --max-run-s \d+)?'
     r'( --repeats \d+)?',
     'the full run takes about an hour on 2 shared cores; the same tool and code path run '
     'with --quick in tests/test_benchmark_resolution.py::'
     'test_quick_run_measures_backbones_and_segmentors_and_writes_csv_and_plot'),
    (r'(OMP_NUM_THREADS=1 )?python -m benchmarks\.deploy( .*)?',
     'tests/test_benchmark_deploy.py::test_quick_run_exports_checks_times_and_writes (the '
     'full-size runs: docs/performance.md, by hand)'),
    (r'python -m benchmarks\.compile( .*)?',
     'a benchmark of compile times (minutes per new size with Inductor); what it times, the '
     'graph capture over a stream of sizes and its agreement with eager, is '
     'tests/test_compile.py'),
    (r'python -m benchmarks --floor --quick',
     'tests/test_benchmark_floor.py::'
     'test_quick_floor_run_times_module_and_linears_and_profiles_the_rest'),
    (r'(OMP_NUM_THREADS=1 )?python -m benchmarks --floor( --compile-backend \w+)?( --repeats \d+)?',
     'the full run takes ~5 min on 2 cores (compiled: ~15); the same tool and code path run '
     'with --quick in tests/test_benchmark_floor.py::'
     'test_quick_floor_run_times_module_and_linears_and_profiles_the_rest, compiled in '
     'tests/test_benchmark_floor.py::'
     'test_floor_under_torch_compile_times_the_compiled_module_and_linears'),
    (r'(OMP_NUM_THREADS=1 )?python tools/benchmark\.py( --quick| --only \w+| --repeats \d+)*',
     'the full run takes about an hour on 2 cores; the same tool runs every part with --quick '
     'in tests/test_benchmark_floor.py::test_tools_benchmark_runs_the_three_comparisons'),
    (r'INLINE_MM_INDUCTOR=1 python -m pytest tests/test_compile\.py -k .*',
     'the opt-in Inductor test itself (minutes on 2 cores, not a CI step): '
     'tests/test_compile.py::test_inductor_dynamic_two_sizes'),
    (r'python -m benchmarks\.padded_compile( .*)?',
     'a benchmark of graph capture (minutes per family); the agreement of compiled '
     'padding-unaware graphs with eager is tests/test_compile.py, the padding-aware path in '
     'eager tests/test_padding.py'),
    (r'python -m benchmarks --deit --quick',
     'tests/test_benchmark_deit.py::test_quick_run_writes_ratio_table_split_csv_and_plot'),
    (r'(OMP_NUM_THREADS=1 )?python -m benchmarks --deit'
     r'( --split-only| --repeats 3| --sizes 224 384 640 --repeats 7)?',
     'the full InLine-DeiT benchmark takes 20-40 min on 2 cores; the same tool and code path '
     'run with --deit --quick in '
     'tests/test_benchmark_deit.py::test_quick_run_writes_ratio_table_split_csv_and_plot'),
    (r'(OMP_NUM_THREADS=1 )?python tools/analysis_tools/padding_features\.py',
     'the same tool on a smoke model: '
     'tests/test_padding.py::test_padding_features_tool_reports_before_and_after'),
    (r'python tools/analysis_tools/padding_consistency\.py '
     r'configs/inline_swin/mask-rcnn_inline-swin-nano_.*',
     'needs the demo model (`make demo`, 30 min); the same tool on a tiny generated set and '
     'model: tests/test_padding_consistency.py::test_padding_consistency_tool'),
    (r'python -m benchmarks --padding --quick',
     'tests/test_benchmark_padding.py::test_quick_run_writes_table_and_csv'),
    (r'(OMP_NUM_THREADS=1 )?python -m benchmarks --padding( .*)?',
     'the full padding benchmark takes 1-3 h on 2 cores; the same tool and code path run with '
     '--padding --quick in tests/test_benchmark_padding.py::test_quick_run_writes_table_and_csv'),
    (r'python tools/train\.py configs/inline_deit/inline-deit-t-in1k-pre_upernet_.*',
     'the shipped config, shrunk, trains and tests through tools/train.py and tools/test.py in '
     'tests/test_deit_e2e.py::test_upernet_train_checkpoint_test'),
    (r'python tools/train\.py configs/inline_swin/mask-rcnn_.*',
     'tests/test_stock_tools.py::test_readme_train'),
    (r'mim train mmdet .*', 'tests/test_stock_tools.py::test_mim_test'),
    (r'mim test +mmdet .*', 'tests/test_stock_tools.py::test_mim_test'),
    (r'mim run mmdet analyze_logs .*', 'tests/test_stock_tools.py::test_analyze_logs'),
    (r'mim run mmdet browse_dataset .*', 'tests/test_stock_tools.py::test_browse_dataset'),
    (r'(\S+=\S+ )*bash tools/(dist_train|dist_test|slurm_train)\.sh .*',
     'tests/test_readme.py::test_distributed_lines_without_launching'),
    (r'python tools/misc/make_toy_dataset\.py ade data/toy_ade'
     r'|python tools/(train|test)\.py +configs/inline_swin/inline-swin-t-in1k-pre_upernet.*',
     'tests/test_readme.py::test_readme_segmentation_commands_on_toy_ade'),
    (r'python tools/misc/make_toy_dataset\.py cityscapes data/toy_city',
     'tests/test_cityscapes.py::test_toy_cityscapes_command_as_documented'),
    (r'python benchmarks/dataset_check\.py',
     'writes 2,000 images and runs 9 checks (~4 min on 2 cores); its set passes the checker in '
     'tests/test_data_decode.py::test_benchmark_set_is_ade20k_like_and_passes'),
    (r'python tools/misc/make_toy_dataset\.py folder data/my_dataset'
     r'|python tools/misc/check_dataset\.py .*|python tools/dataset_converters/convert_masks\.py .*'
     r'|(mv|cp|mkdir|sed) .*my_dataset.*|python tools/(train|test)\.py configs/my_dataset.*',
     'tests/test_readme.py::test_finetune_walkthrough_as_written'),
    (r'python tools/attention_map\.py --config \S+ --checkpoint inline://swin_t .*',
     'needs the official InLine-Swin-T file (no download here); the same command with '
     '--random-weights instead: '
     'tests/test_attention_maps.py::test_attention_map_tool_on_a_config'),
    (r'python tools/attention_map\.py --model InLineSwin --arch tiny --random-weights .*',
     'tests/test_attention_maps.py::test_docs_picture_command'),
]

_COMMAND = re.compile(r'(\S+=\S+ )*(python|\.venv/bin/python|bash|make|mim|pip|mv|cp|mkdir|sed)'
                      r'( |$)')
#: inline code that names a command in prose rather than giving one to run
_MENTIONS = {'mim', 'mim run', 'pip', 'pip install'}


def commands(text: str) -> list:
    """Commands in ``text``, in document order: every line of ``bash`` blocks (comments
    and continuation lines joined) and inline code that starts like a command."""
    found = []
    for m in re.finditer(r'```bash\n(.*?)```|```.*?```|`([^`\n]+)`', text, re.S):
        if m[1] is not None:
            for line in re.sub(r'\\\n\s*', ' ', m[1]).splitlines():
                line = re.sub(r'\s+#.*$', '', line).strip()
                if line and not line.startswith('#'):
                    found.extend(part.strip() for part in line.split(' && '))
        elif m[2] is not None and _COMMAND.match(m[2]) and m[2] not in _MENTIONS:
            found.append(m[2].strip())
    return found


def page(name: str) -> str:
    """The text of docs/<name>.md."""
    return (ROOT / 'docs' / f'{name}.md').read_text()


def test_every_documented_command_is_covered():
    uncovered = [f'{p.relative_to(ROOT)}: {c}' for p in PAGES for c in commands(p.read_text())
                 if not any(re.fullmatch(pat, c) for pat, _ in COVERED)]
    assert not uncovered, ('commands that no test runs; run them in a test and add them to '
                           'COVERED, or say there why none can:\n' + '\n'.join(uncovered))
    documented = [c for p in PAGES for c in commands(p.read_text())]
    stale = [pat for pat, _ in COVERED if not any(re.fullmatch(pat, c) for c in documented)]
    assert not stale, f'COVERED entries that no page uses any more: {stale}'
    for _, where in COVERED:
        for path, name in re.findall(r'(tests/\w+\.py)::(\w+)', where):
            assert re.search(rf'^def {name}\(', (ROOT / path).read_text(), re.M), (
                f'COVERED names {path}::{name}, which does not exist')


def test_readme_usage_config_builds(tmp_path):
    """The README's usage example is a working config: saved where it says (the repository
    root, here a folder that links configs/), it resolves, and its backbone's maps are what
    its neck is told to expect."""
    import torch
    from mmdet.registry import MODELS
    from mmdet.utils import register_all_modules
    from mmengine.config import Config
    block = re.search(r'```python\n(# my_config\.py.*?)```', (ROOT / 'README.md').read_text(),
                      re.S)
    assert block, 'the README lost its my_config.py example'
    (tmp_path / 'configs').symlink_to(ROOT / 'configs')
    (tmp_path / 'my_config.py').write_text(block[1])
    cfg = Config.fromfile(str(tmp_path / 'my_config.py'))
    assert 'inline_mm' in cfg.custom_imports['imports']
    register_all_modules()
    import inline_mm  # noqa: F401  (what custom_imports does for the stock tools)
    cfg.model.backbone.init_cfg = None            # random weights: no download in the suite
    backbone = MODELS.build(cfg.model.backbone).eval()
    with torch.no_grad():
        maps = backbone(torch.randn(1, 3, 64, 96))
    assert [m.shape[1] for m in maps] == list(cfg.model.neck.in_channels)
    MODELS.build(cfg.model)                       # and the whole detector builds


# ----------------------------------------------------------------- running commands
def workspace(tmp_path: Path) -> Path:
    """A scratch folder laid out like the repository: tools/ and every configs/<family>/
    link to the checkout; configs/ itself is writable (configs/my_dataset.py)."""
    ws = tmp_path / 'ws'
    (ws / 'configs').mkdir(parents=True)
    (ws / 'tools').symlink_to(ROOT / 'tools')
    for d in (ROOT / 'configs').iterdir():
        if d.is_dir():
            (ws / 'configs' / d.name).symlink_to(d)
    shims = tmp_path / 'bin'
    shims.mkdir()
    shim = shims / 'python'             # `python` in the README: this interpreter
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    shim.chmod(0o755)
    return ws


def shell(cmd: str, cwd: Path, timeout=TIMEOUT, **env_extra) -> str:
    env = dict(os.environ, OMP_NUM_THREADS='1', PYTHONUNBUFFERED='1', **env_extra)
    env['PATH'] = f'{cwd.parent / "bin"}{os.pathsep}{env["PATH"]}'
    env['PYTHONPATH'] = str(ROOT) + os.pathsep + env.get('PYTHONPATH', '')
    proc = subprocess.run(['bash', '-c', cmd], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f'$ {cmd}\n{out[-4000:]}'
    return out


# ----------------------------------------------------------------- fine-tuning walkthrough
REHEARSAL_INTRO = 'To rehearse on the toy set'
#: Test only, appended to the user's config after the README's edits: a narrower model, so
#: that 200 iterations fit the suite's budget (the template's InLine-Swin-T takes ~2 s an
#: iteration here). Schedule, data, heads and recipe stay the template's.
NARROW = """
model['backbone'].update(embed_dims=16, depths=(1, 1, 1, 1), num_heads=(1, 1, 2, 2))
model['decode_head'].update(in_channels=[16, 32, 64, 128], channels=32)
model['auxiliary_head'].update(in_channels=64, channels=16)
"""


def rehearsal_edits(text: str) -> list:
    block = re.search(re.escape(REHEARSAL_INTRO) + r'.*?```python\n(.*?)```', text, re.S)
    assert block, f'the walkthrough lost its "{REHEARSAL_INTRO}" block'
    return [line.split('#')[0].strip() for line in block[1].splitlines() if line.strip()]


def apply_edits(config: Path, edits: list):
    text = config.read_text()
    for line in edits:
        name = line.split('=')[0].strip()
        text, n = re.subn(rf'^{name} = .*$', line, text, flags=re.M)
        assert n == 1, f'the template has no single line "{name} = ..." for the README edit'
    config.write_text(text + NARROW)


def logged(log: str, key: str) -> list:
    return [float(v) for v in re.findall(
        rf'Iter\(train\).*?\s{re.escape(key)}: ([\d.]+(?:e[-+]?\d+)?)', log)]


def majority_miou(mask_dir: Path, num_classes: int) -> float:
    """mIoU (in %) of predicting the most frequent class everywhere: the chance level."""
    counts = np.zeros(256, np.int64)
    for f in mask_dir.iterdir():
        counts += np.bincount(np.array(Image.open(f)).ravel(), minlength=256)
    counts = counts[:num_classes]
    present = (counts > 0).sum()
    return 100.0 * counts.max() / counts.sum() / present


@pytest.mark.subprocess
@pytest.mark.slow
def test_finetune_walkthrough_as_written(tmp_path):
    text = page('own_data')
    steps = commands(text)
    edits = rehearsal_edits(text)
    ws = workspace(tmp_path)
    data = ws / 'data' / 'my_dataset'
    logs = {}
    ckpt = None
    for cmd in steps:
        if 'best_mIoU_iter_N' in cmd:
            ckpt = ckpt or next((ws / 'work_dirs' / 'my_dataset').glob('best_mIoU_iter_*.pth'))
            cmd = cmd.replace('work_dirs/my_dataset/best_mIoU_iter_N.pth',
                              str(ckpt.relative_to(ws)))
        logs[cmd] = shell(cmd, ws)
        if cmd.startswith('cp configs/custom/') and cmd.endswith(' configs/my_dataset.py'):
            apply_edits(ws / 'configs' / 'my_dataset.py', edits)
    ran = ' '.join(steps)
    for must in ('make_toy_dataset.py folder', 'check_dataset.py data/', 'convert_masks.py',
                 'check_dataset.py --config', 'tools/train.py', '--out work_dirs/my_dataset/val',
                 'configs/my_dataset_predict.py'):
        assert must in ran, f'the walkthrough no longer runs {must}'

    check = next(v for k, v in logs.items()
                 if k.startswith('python tools/misc/check_dataset.py --c'))
    assert 'OK: train, val look fine for 4 classes' in check, check
    train = next(v for k, v in logs.items() if k.startswith('python tools/train.py'))
    losses = logged(train, 'loss')
    assert len(losses) >= 10, train[-3000:]
    assert np.mean(losses[-3:]) < 0.75 * np.mean(losses[:3]), f'loss did not fall: {losses}'
    lrs = logged(train, 'lr')
    assert max(lrs) == pytest.approx(1e-3, rel=0.05), f'the warm-up never reached lr: {lrs}'
    miou = float(re.findall(r'mIoU: ([\d.]+)', train)[-1])
    chance = majority_miou(data / 'masks' / 'val', 4)
    assert miou > chance + 5, f'val mIoU {miou} is not clearly above chance ({chance:.1f})'
    assert re.search(r'\|\s+triangle\s+\|', train), 'no per-class table'

    test = next(v for k, v in logs.items() if '--out work_dirs/my_dataset/val' in k)
    assert float(re.findall(r'mIoU: ([\d.]+)', test)[-1]) == pytest.approx(miou, abs=0.01)
    palette = [c for rgb in json.loads((data / 'meta.json').read_text())['palette'] for c in rgb]
    for out, images in (('val_predictions', 'val'), ('predictions', 'test')):
        stems = sorted(p.stem for p in (data / 'images' / images).iterdir())
        saved = sorted((ws / 'work_dirs' / 'my_dataset' / out).glob('*.png'))
        assert [p.stem for p in saved] == stems
        pred = Image.open(saved[0])
        assert pred.mode == 'P' and pred.getpalette()[:len(palette)] == palette
        assert set(np.unique(np.array(pred))) <= {0, 1, 2, 3}


# ----------------------------------------------------------------- segmentation, toy ADE20K
@pytest.mark.subprocess
@pytest.mark.slow
def test_readme_segmentation_commands_on_toy_ade(tmp_path):
    text = page('segmentation')
    make = next(c for c in commands(text)
                if c.startswith('python tools/misc/make_toy_dataset.py ade'))
    train, test = (next(c for c in commands(text) if c.startswith(f'python tools/{t}.py'))
                   for t in ('train', 'test'))
    ws = workspace(tmp_path)
    shell(make, ws)
    root = make.split()[-1]
    # One iteration on 64-pixel crops, random weights, no validation inside training,
    # testing on 2 of the val images: the commands, not the model, are under test.
    opts = ['val_cfg=None', 'val_dataloader=None', 'val_evaluator=None']
    opts += [f'{s}_dataloader.{k}' for s in ('train', 'test')
             for k in ('num_workers=0', 'persistent_workers=False', f'dataset.data_root={root}')]
    from mmengine.config import Config
    cfg = Config.fromfile(str(ROOT / train.split()[2]))
    step = {split: [t['type'] for t in cfg[f'{split}_dataloader'].dataset.pipeline].index
            for split in ('train', 'test')}
    opts += ['train_dataloader.batch_size=2', 'model.backbone.init_cfg=None',
             f"train_dataloader.dataset.pipeline.{step['train']('RandomResize')}.scale=(128,128)",
             f"train_dataloader.dataset.pipeline.{step['train']('RandomCrop')}.crop_size=(64,64)",
             'model.data_preprocessor.size=(64,64)',
             f"test_dataloader.dataset.pipeline.{step['test']('Resize')}.scale=(128,128)",
             'test_dataloader.dataset.indices=2',
             'train_cfg.max_iters=1', 'default_hooks.checkpoint.interval=1',
             'default_hooks.logger.interval=1']
    cfg_options = ' --cfg-options ' + ' '.join(shlex.quote(o) for o in opts)
    log = shell(train + cfg_options, ws)
    assert 'Iter(train) [1/1]' in log, log[-3000:]
    test = re.sub(r'iter_160000\.pth', 'iter_1.pth', test)
    log = shell(test + cfg_options, ws)
    assert 'Iter(test) [2/2]' in log and re.search(r'mIoU: [\d.]+', log), log[-3000:]


# ----------------------------------------------------------------- multi-GPU / node / Slurm
RECORDER = """#!/usr/bin/env bash
printf '%s\\0' "$0" "$@" >> "$RECORD"
printf '\\n' >> "$RECORD"
"""


def _stock_parser(tool: str):
    """``parse_args`` of mmdet's own tools/<tool>.py, reading a given argv."""
    import importlib.util
    import mmdet
    path = Path(mmdet.__file__).parent / '.mim' / 'tools' / f'{tool}.py'
    spec = importlib.util.spec_from_file_location(f'_stock_{tool}', path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)

    def parse(argv):
        saved = sys.argv
        sys.argv = [str(path), *argv]
        try:
            return mod.parse_args()
        finally:
            sys.argv = saved
    return parse


@pytest.mark.subprocess
def test_distributed_lines_without_launching(tmp_path):
    from torch.distributed.run import get_args_parser
    lines = [c for c in commands(page('detection')) if re.search(r'tools/\w+\.sh', c)]
    assert len(lines) == 4, lines
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    fake = bin_dir / 'fake'
    fake.write_text(RECORDER)
    fake.chmod(0o755)
    (bin_dir / 'srun').symlink_to(fake)
    record = tmp_path / 'record'
    config = 'configs/inline_swin/mask-rcnn_inline-swin-t_fpn_1x_coco.py'
    train_args, test_args = _stock_parser('train'), _stock_parser('test')
    for line in lines:
        # Never another machine's address: the multi-node line is checked with loopback.
        line = re.sub(r'MASTER_ADDR=\S+', 'MASTER_ADDR=127.0.0.1', line).replace('CONFIG', config)
        record.write_bytes(b'')
        env = dict(os.environ, PYTHON=str(fake), RECORD=str(record),
                   PATH=f'{bin_dir}{os.pathsep}{os.environ["PATH"]}')
        proc = subprocess.run(['bash', '-c', line], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 0, f'$ {line}\n{proc.stdout}{proc.stderr}'
        calls = [c.split('\0') for c in record.read_text().split('\0\n') if c]
        assert len(calls) == 1, calls
        argv = calls[0][1:]
        if 'slurm_train.sh' in line:
            assert Path(calls[0][0]).name == 'srun'
            assert argv[:2] == ['-p', 'PARTITION'] and '--job-name=JOB_NAME' in argv
            assert '--ntasks=16' in argv and '--ntasks-per-node=8' in argv
            assert '--gres=gpu:8' in argv
            script = next(i for i, a in enumerate(argv) if a.endswith('tools/train.py'))
            args = train_args(argv[script + 1:])
            assert (args.config, args.work_dir, args.launcher) == (config, 'WORK_DIR', 'slurm')
            continue
        assert argv[:2] == ['-m', 'torch.distributed.run'], argv
        run = get_args_parser().parse_args(argv[2:])
        assert run.nproc_per_node == '8' and run.master_addr == '127.0.0.1'
        assert Path(run.training_script).parent == ROOT / 'tools'
        if 'NNODES=2' in line:
            assert (run.nnodes, run.node_rank, run.master_port) == ('2', 0, 29500)
        if Path(run.training_script).name == 'train.py':
            args = train_args(run.training_script_args)
            assert (args.config, args.launcher) == (config, 'pytorch')
        else:
            args = test_args(run.training_script_args)
            assert args.checkpoint.endswith('epoch_12.pth') and args.launcher == 'pytorch'
        assert (ROOT / args.config).is_file()
