"""The commands of the README and of every page in docs/, docs/dev/, configs/*/ and
checkpoints/, as written, so that the text cannot drift from the code. What is checked is that
each command runs or parses, never how a page words it.

- Every command (``bash`` blocks and inline commands) parses: its program exists (a file of
  the checkout, a module, a ``make`` target, a ``mim`` or ``pip`` subcommand) and its
  arguments pass the program's own parser (argparse, click or pip's), stopped right after
  parsing; a config path names a file of the checkout or one the page itself creates.
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

Other commands run in the tests of their tools (the demo, the benchmarks' ``--quick`` runs, the
stock tools in tests/test_stock_tools.py, the weights CLI against a local mirror, ...).
"""
import argparse
import contextlib
import functools
import io
import json
import os
import re
import runpy
import shlex
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
#: every page whose commands are checked
PAGES = sorted({ROOT / 'README.md', ROOT / 'checkpoints' / 'README.md',
                *(ROOT / 'docs').glob('*.md'), *(ROOT / 'docs' / 'dev').glob('*.md'),
                *(ROOT / 'configs').glob('*/README.md')})
TIMEOUT = 600

_COMMAND = re.compile(r'(\S+=\S+ )*(\S*python3?|\S*/bin/pip|bash|make|mim|pip|mv|cp|mkdir|sed)'
                      r'( |$)')
#: inline code that names a command in prose rather than giving one to run
_MENTIONS = {'mim', 'mim run', 'pip', 'pip install'}
#: scripts the pages run that are not part of this project, and where they come from
EXTERNAL = {'validate.py': "timm's validation script, in timm's repository"}
#: a word, or a part of a path, that stands for what the reader fills in
_PLACEHOLDER = re.compile(r'^[A-Z][A-Z_]*$|^<.*>$')


def placeholder(word: str) -> bool:
    """``CONFIG``, ``configs/inline_swin/CONFIG.py``, ``<repo-url>``, ``/path/to/...``."""
    return word.startswith('/path/to/') or any(
        _PLACEHOLDER.match(part.split('.')[0]) for part in word.split('/') if part)


#: programs whose lines are only split into words (their arguments are data paths)
SHELL_ONLY = {'mkdir', 'sed', 'tar', 'sort', 'wget', 'git', 'trtexec'}


def commands(text: str, inline_flags: bool = False) -> list:
    """Commands in ``text``, in document order: every line of ``bash`` blocks (comments
    and continuation lines joined) and inline code that starts like a command; with
    ``inline_flags``, as ``(command, is_inline_code)`` pairs."""
    found = []
    for m in re.finditer(r'```bash\n(.*?)```|```.*?```|`([^`\n]+)`', text, re.S):
        if m[1] is not None:
            for line in re.sub(r'\\\n\s*', ' ', m[1]).splitlines():
                line = re.sub(r'\s+#.*$', '', line).strip()
                if line and not line.startswith('#'):
                    found.extend((part.strip(), False) for part in line.split(' && '))
        elif m[2] is not None and _COMMAND.match(m[2]) and m[2] not in _MENTIONS:
            found.append((m[2].strip(), True))
    return found if inline_flags else [c for c, _ in found]


def page(name: str) -> str:
    """The text of docs/<name>.md."""
    return (ROOT / 'docs' / f'{name}.md').read_text()


# ----------------------------------------------------------------- every command parses
class _Parsed(Exception):
    """Raised by the argparse stand-in once a program has parsed its arguments."""

    def __init__(self, namespace):
        super().__init__('parsed')
        self.namespace = namespace


@contextlib.contextmanager
def _stop_after_parsing():
    """``ArgumentParser.parse_args`` / ``parse_known_args`` parse as usual, then stop the
    program (:class:`_Parsed`); the calls they make themselves (``parse_args`` calls
    ``parse_known_args``, subparsers parse their part) return normally."""
    parser = argparse.ArgumentParser
    originals = parser.parse_args, parser.parse_known_args
    depth = [0]

    def stopping(method):
        def call(self, args=None, namespace=None):
            depth[0] += 1
            try:
                result = method(self, args, namespace)
            finally:
                depth[0] -= 1
            if depth[0] == 0:
                raise _Parsed(result[0] if isinstance(result, tuple) else result)
            return result
        return call

    parser.parse_args, parser.parse_known_args = (stopping(m) for m in originals)
    try:
        yield
    finally:
        parser.parse_args, parser.parse_known_args = originals


def parse_only(target: str, argv: list, module: bool = False):
    """Run the program ``target`` (a script path, or a module with ``module=True``) on
    ``argv`` until it has parsed its arguments; returns the namespace. Raises AssertionError
    with the parser's message if it refuses them, or if the program never parses."""
    saved_argv = sys.argv
    sys.argv = [target, *argv]
    err = io.StringIO()
    try:
        with _stop_after_parsing(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.simplefilter('ignore')
            if module:
                runpy.run_module(target, run_name='__main__', alter_sys=True)
            else:
                runpy.run_path(target, run_name='__main__')
    except _Parsed as parsed:
        return parsed.namespace
    except SystemExit as e:
        raise AssertionError(f'refused (exit {e.code}): {err.getvalue().strip()[-600:]}') from None
    finally:
        sys.argv = saved_argv
    raise AssertionError('ran to its end without parsing its arguments with argparse')


@functools.lru_cache(maxsize=None)
def _scope(config: str) -> str:
    from mmengine.config import Config
    try:
        return Config.fromfile(config).get('default_scope', 'mmdet')
    except FileNotFoundError as e:      # an own-instance template reads its train.json
        if 'INLINE_MM_DATA' not in str(e):
            raise
        return 'mmdet'


def _check_launch(tool: str, argv: list, created: dict):
    """``tools/train.py`` / ``tools/test.py``: the config exists (or the page creates it), and
    the stock script of its framework parses the rest as the launcher hands it over."""
    from inline_mm.cli.launch import stock_script
    assert argv and not argv[0].startswith('-'), 'no config given'
    config = argv[0]
    source = created.get(config, config)
    if placeholder(config) or not source.endswith('.py'):
        scope = 'mmdet'
    elif (ROOT / source).is_file():
        scope = _scope(str(ROOT / source))
    else:
        assert config in created, f'{config}: no such config, and the page does not create it'
        scope = 'mmdet'
    parse_only(stock_script(scope, tool), argv)


def _check_mim(argv: list, mention: bool):
    import click
    from mim.cli import cli
    command = cli.get_command(click.Context(cli), argv[0]) if argv else None
    assert command is not None, f'mim has no command {argv[:1]}'
    if mention and len(argv) <= 2:
        return                                     # prose: `mim train inline_mm`
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        command.make_context(argv[0], list(argv[1:]))


#: parses pip command lines with pip's own parsers, in a process of its own: importing pip
#: switches setuptools' distutils shim off for the rest of the process (mim then fails)
_PIP_PARSE = """
import json, sys
from pip._internal.commands import commands_dict, create_command
for argv in json.loads(sys.argv[1]):
    if not argv or argv[0] not in commands_dict:
        sys.exit(f'pip has no command {argv[:1]}')
    create_command(argv[0]).parse_args(argv[1:])
"""


def _check_pip(lines: list):
    """Each of ``lines`` (pip's arguments) parses with pip's parser for its subcommand."""
    if lines:
        out = subprocess.run([sys.executable, '-c', _PIP_PARSE, json.dumps(lines)],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, f'pip refuses one of {lines}: {out.stderr[-600:]}'


@functools.lru_cache(maxsize=None)
def _make_targets() -> frozenset:
    return frozenset(re.findall(r'^([A-Za-z][\w-]*):', (ROOT / 'Makefile').read_text(), re.M))


def _defined_files(text: str) -> dict:
    """Files a page writes in a code block that starts with a ``# name.py`` comment."""
    return {m[1]: m[1] for m in re.finditer(r'```python\n# ([\w./-]+\.py)\b', text)}


def check_command(cmd: str, created: dict, mention: bool = False):
    """Parse one documented command (see the module docstring); ``created`` maps the files
    earlier commands of the page made to where they came from. A ``mention`` (inline code
    naming a program without arguments, as prose does) needs only the program. pip lines are
    left to :func:`test_every_documented_pip_line_parses`."""
    words = shlex.split(cmd)
    while words and re.match(r'^[A-Za-z_]\w*=', words[0]):
        words.pop(0)                                         # environment variables
    assert words, 'empty command'
    program, args = words[0], words[1:]
    name = Path(program).name
    if name in ('python', 'python3'):
        if not args:
            assert mention, 'python without a program'
            return
        if args[0] == '-m':
            module, rest = args[1], args[2:]
            if module == 'pytest':
                tests = [a for a in rest if a.startswith('tests/')]
                assert tests and all((ROOT / t.split('::')[0]).is_file() for t in tests), rest
                return
            import importlib.util     # `python -m pytest` from the checkout finds benchmarks/
            assert importlib.util.find_spec(module) is not None, f'no module {module}'
            if rest or not mention:
                parse_only(module, rest, module=True)
        elif args[0] in EXTERNAL:
            return
        else:
            script = ROOT / args[0]
            assert script.is_file(), f'{args[0]}: no such file in the checkout'
            if mention and not args[1:]:
                return
            if args[0] in ('tools/train.py', 'tools/test.py'):
                _check_launch(Path(args[0]).stem, args[1:], created)
            else:
                parse_only(str(script), args[1:])
    elif program == 'bash':
        assert args and (ROOT / args[0]).is_file(), f'{args[:1]}: no such script'
    elif program == 'make':
        assert args and set(args) <= _make_targets(), f'no make target {args}'
    elif program == 'mim':
        _check_mim(args, mention)
    elif name == 'pip':
        return
    elif program in ('cp', 'mv'):
        *sources, dest = [a for a in args if not a.startswith('-')]
        for src in sources:
            if src.startswith(('configs/', 'tools/')):
                assert (ROOT / src).is_file(), f'{src}: no such file in the checkout'
            created[dest] = src
    elif program not in SHELL_ONLY:
        raise AssertionError(f'no rule for the program {program!r}: add one to '
                             'tests/test_readme.py')


@pytest.mark.parametrize('doc', PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_documented_command_parses(doc):
    text = doc.read_text()
    created, failed = _defined_files(text), []
    for cmd, inline in commands(text, inline_flags=True):
        try:
            check_command(cmd, created, mention=inline)
        except AssertionError as e:
            failed.append(f'$ {cmd}\n    {e}')
    assert not failed, f'{doc.relative_to(ROOT)}:\n' + '\n'.join(failed)


@pytest.mark.subprocess
def test_every_documented_pip_line_parses():
    lines = []
    for doc in PAGES:
        for cmd in commands(doc.read_text()):
            words = [w for w in shlex.split(cmd) if not re.match(r'^[A-Za-z_]\w*=', w)]
            if words and Path(words[0]).name == 'pip':
                lines.append(words[1:])
    assert lines
    _check_pip(lines)
    with pytest.raises(AssertionError, match='pip refuses'):
        _check_pip([['install', 'openmim'], ['instal', 'openmim']])


def test_the_parse_check_refuses_what_a_reader_could_not_run():
    """The check itself: a misspelt option, a missing script, a missing config and an
    unknown target each fail; a placeholder passes."""
    for bad in ('python tools/analysis_tools/get_flops.py CONFIG --size 800',
                'python tools/no_such_tool.py', 'make no-such-target',
                'python tools/train.py configs/inline_swin/no_such_config.py',
                'python tools/convert.py', 'mim trian mmdet CONFIG'):
        with pytest.raises(AssertionError):
            check_command(bad, {})
    check_command('python tools/analysis_tools/get_flops.py CONFIG --shape 800 1280', {})
    check_command('python tools/train.py configs/my_dataset.py --work-dir W',
                  {'configs/my_dataset.py': 'configs/custom/'
                   'inline-swin-t-in1k-pre_upernet_1xb4-20k_custom-512x512.py'})
    check_command('python tools/demo.py', {}, mention=True)      # prose naming a tool


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


def rehearsal_edits(text: str, intro: str = REHEARSAL_INTRO) -> list:
    """The config edits of the ```python block after ``intro`` in a walkthrough."""
    block = re.search(re.escape(intro) + r'.*?```python\n(.*?)```', text, re.S)
    assert block, f'the walkthrough lost its "{intro}" block'
    return [line.split('#')[0].strip() for line in block[1].splitlines() if line.strip()]


def apply_edits(config: Path, edits: list, narrow: str = NARROW):
    """Each ``name = value`` edit replaces the template's one line of ``name``; then the
    narrowing lines that keep the walkthrough's model small."""
    text = config.read_text()
    for line in edits:
        name = line.split('=')[0].strip()
        text, n = re.subn(rf'^{name} = .*$', line, text, flags=re.M)
        assert n == 1, f'the template has no single line "{name} = ..." for the documented edit'
    config.write_text(text + narrow)


def edit_if_copied(cmd: str, config: Path, edits: list, narrow: str = NARROW) -> None:
    """After the page's ``cp configs/custom/... configs/<name>.py``, its edits to the copy."""
    if cmd.startswith('cp configs/custom/') and cmd.endswith(f' configs/{config.name}'):
        apply_edits(config, edits, narrow)


def with_best_checkpoint(cmd: str, ws: Path, placeholder: str, found: list) -> str:
    """``cmd`` with the page's stand-in for the best checkpoint (``.../best_<metric>_N.pth``)
    replaced by the file the training wrote; ``found`` keeps that file between calls."""
    if placeholder not in cmd:
        return cmd
    if not found:
        where, name = Path(placeholder).parent, Path(placeholder).name
        found.append(next((ws / where).glob(name.rsplit('_', 1)[0] + '_*.pth')))
    return cmd.replace(placeholder, str(found[0].relative_to(ws)))


def assert_walkthrough_runs(steps: list, musts) -> None:
    """Each of ``musts`` is part of one of the walkthrough's commands."""
    ran = ' '.join(steps)
    for must in musts:
        assert must in ran, f'the walkthrough no longer runs {must}'


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
    logs, best = {}, []
    for cmd in steps:
        cmd = with_best_checkpoint(cmd, ws, 'work_dirs/my_dataset/best_mIoU_iter_N.pth', best)
        logs[cmd] = shell(cmd, ws)
        edit_if_copied(cmd, ws / 'configs' / 'my_dataset.py', edits)
    assert_walkthrough_runs(steps, (
        'make_toy_dataset.py folder', 'check_dataset.py data/', 'convert_masks.py',
        'check_dataset.py --config', 'tools/train.py', '--out work_dirs/my_dataset/val',
        'configs/my_dataset_predict.py'))

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
    """mmdet's own tools/<tool>.py parsing a given argv (stopped after parsing)."""
    import mmdet
    path = str(Path(mmdet.__file__).parent / '.mim' / 'tools' / f'{tool}.py')
    return functools.partial(parse_only, path)


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
