"""What 0.2.0 moved still imports from its 0.1.x path, with a warning a script's user sees, and
the changelog says so for the version the package has.

The 0.1.x paths are written out here, not read from ``inline_mm.version``: dropping an entry of
its tables fails these tests.
"""
import importlib
import importlib.metadata
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

import inline_mm
from inline_mm import version

ROOT = Path(__file__).resolve().parents[1]
CHANGELOG = ROOT / 'docs' / 'changelog.md'

#: every module path of 0.1.x that 0.2.0 moved -> where it is now
OLD_MODULES = {
    'inline_mm.attention_maps': 'inline_mm.visualization.attention_maps',
    'inline_mm.attention_views': 'inline_mm.visualization.attention_views',
    'inline_mm.compat': 'inline_mm.patches.mmengine_checkpoints',
    'inline_mm.config_types': 'inline_mm.apis.config',
    'inline_mm.consistency': 'inline_mm.analysis.consistency',
    'inline_mm.detection': 'inline_mm.models.detection',
    'inline_mm.detection.pad_aware_rpn': 'inline_mm.models.detection.pad_aware_rpn',
    'inline_mm.detection.simple_fpn': 'inline_mm.models.detection.simple_fpn',
    'inline_mm.engine.checkpointing': 'inline_mm.patches.checkpointing',
    'inline_mm.engine.compiling': 'inline_mm.patches.compiling',
    'inline_mm.engine.distributed': 'inline_mm.patches.distributed',
    'inline_mm.engine.loading': 'inline_mm.patches.loading',
    'inline_mm.engine.random_state': 'inline_mm.patches.random_state',
    'inline_mm.engine.workers': 'inline_mm.patches.workers',
    'inline_mm.export': 'inline_mm.deploy.backbone',
    'inline_mm.memory': 'inline_mm.analysis.memory',
    'inline_mm.mmcv_ext': 'inline_mm.patches.mmcv_ext',
    'inline_mm.toydata': 'inline_mm.datasets.toy',
    'inline_mm.toydata.coco': 'inline_mm.datasets.toy.coco',
    'inline_mm.toydata.exports': 'inline_mm.datasets.toy.exports',
    'inline_mm.toydata.segmentation': 'inline_mm.datasets.toy.segmentation',
    'inline_mm.weights': 'inline_mm.models.weights',
}

#: names of a 0.1.x module that stays, moved out of it -> their module now
OLD_NAMES = {
    'inline_mm.analysis': {'Complexity': 'inline_mm.analysis.complexity',
                           'count_macs': 'inline_mm.analysis.complexity',
                           'count_params': 'inline_mm.analysis.complexity',
                           'measure': 'inline_mm.analysis.complexity'},
    'inline_mm.timm': {'InLineClassifier': 'inline_mm.models',
                       'InLineFeatures': 'inline_mm.models',
                       'InLineIntermediates': 'inline_mm.models'},
}

#: a 0.1.x module that 0.2.0 split -> {each name of its __all__: its module now}
OLD_SPLIT = {
    'inline_mm.datasets.checks': {
        **dict.fromkeys(['PROBLEM_CODES', 'Problem'], 'inline_mm.datasets.problems'),
        **dict.fromkeys(['IMAGE_SUFFIXES', 'meta_problems', 'read_meta', 'SplitFiles',
                         'scan_split', 'PairCheck', 'check_pair', 'label_problems',
                         'binary_problems'], 'inline_mm.datasets.folder_checks'),
        **dict.fromkeys(['image_size', 'FileRead', 'read_file', 'decode_problems'],
                        'inline_mm.datasets.image_reading'),
        **dict.fromkeys(['default_jobs', 'parallel_map', 'FileTally', 'FileCheck',
                         'check_sample', 'check_dataset_files', 'dataset_file_problems',
                         'base_datasets'], 'inline_mm.datasets.dataset_files'),
        'check_coco': 'inline_mm.datasets.coco_checks'},
}


def _script(body: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """``body`` run as a user's script (``python script.py``: Python's default warning
    filters, the checkout first on the path)."""
    script = tmp_path / 'user_script.py'
    script.write_text(textwrap.dedent(body))
    env = {'PYTHONPATH': str(ROOT), 'PATH': '/usr/bin:/bin'}
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=300)


def _warned(stderr: str, old: str, new: str) -> bool:
    """Whether ``stderr`` has the warning for ``old``, pointed at the user's script."""
    line = (rf'user_script\.py:\d+: FutureWarning: {re.escape(old)} moved to {re.escape(new)} '
            rf'in inline_mm 0\.2\.0; the old path is removed in {re.escape(version.REMOVED_IN)}')
    return re.search(line, stderr) is not None


@pytest.mark.subprocess
def test_every_old_path_imports_the_new_module_with_a_warning_the_user_sees(tmp_path):
    """Each old path gives the new module or object itself (a moved package's old submodule
    path too, with no second copy of the module for registries to see twice)."""
    lines = ['import importlib, sys']
    for old, new in OLD_MODULES.items():
        lines += [f'import {old}', f'assert sys.modules[{old!r}] is importlib.import_module('
                                   f'{new!r}), {old!r}']
    for module, names in OLD_NAMES.items():
        for name, new in names.items():
            lines += [f'from {module} import {name}',
                      f'assert {name} is getattr(importlib.import_module({new!r}), {name!r})']
    for old, names in OLD_SPLIT.items():
        lines += [f'import {old}', f'split = sys.modules[{old!r}]']
        lines += [f'assert split.{name} is getattr(importlib.import_module({new!r}), {name!r})'
                  for name, new in names.items()]
        lines += [f'assert set(split.__all__) >= {set(names)!r}']
    proc = _script('\n'.join(lines) + '\nprint("OK")\n', tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip().endswith('OK'), proc.stderr[-3000:]
    missing = [old for old, new in OLD_MODULES.items() if not _warned(proc.stderr, old, new)]
    missing += [f'{m}.{n}' for m, names in OLD_NAMES.items() for n, new in names.items()
                if not _warned(proc.stderr, f'{m}.{n}', f'{new}.{n}')]
    missing += [old for old in OLD_SPLIT if not re.search(
        rf'user_script\.py:\d+: FutureWarning: {re.escape(old)} was split into '
        rf'{re.escape(", ".join(version.MOVED_MODULES[old]))} in inline_mm 0\.2\.0; the old path '
        rf'is removed in {re.escape(version.REMOVED_IN)}', proc.stderr)]
    assert not missing, proc.stderr[-3000:]


@pytest.mark.subprocess
def test_python_m_of_an_old_command_says_where_it_went_and_runs_it(capsys):
    from inline_mm.cli.weights import main
    with pytest.raises(SystemExit):
        main(['--help'])
    help_text = capsys.readouterr().out
    old = subprocess.run([sys.executable, '-m', 'inline_mm.weights', '--help'],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert old.returncode == 0, old.stderr[-2000:]
    assert old.stdout == help_text
    assert ('FutureWarning: python -m inline_mm.weights moved to python -m inline_mm.cli.weights '
            '(or inline-mm-weights)') in old.stderr
    assert 'removed in ' + version.REMOVED_IN in old.stderr


def test_a_name_that_never_existed_is_still_an_attribute_error():
    import inline_mm.analysis
    with pytest.raises(AttributeError, match="module 'inline_mm.analysis' has no attribute "
                                             "'count_flops'"):
        inline_mm.analysis.count_flops  # noqa: B018
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module('inline_mm.toydata_v2')


def test_the_tables_hold_every_old_path_and_point_at_modules_that_exist():
    assert {k: v[0] for k, v in version.MOVED_MODULES.items() if len(v) == 1} == OLD_MODULES
    for module, names in version.MOVED_NAMES.items():
        assert names.items() >= OLD_NAMES.get(module, {}).items()
    for homes in version.MOVED_MODULES.values():
        for new in homes:
            importlib.import_module(new)
    for module, names in version.MOVED_NAMES.items():
        for name, new in names.items():
            assert hasattr(importlib.import_module(new), name), f'{new}.{name}'
    with warnings.catch_warnings():
        warnings.simplefilter('error', FutureWarning)
        for module in version.MOVED_NAMES:      # the module that stays imports silently
            importlib.import_module(module)


def _changelog_versions():
    return re.findall(r'^## (\d+\.\d+\.\d+)\b', CHANGELOG.read_text(), re.M)


def test_the_version_is_the_changelogs_newest():
    versions = _changelog_versions()
    assert versions and versions[0] == inline_mm.__version__, versions
    keys = [tuple(map(int, v.split('.'))) for v in versions]
    assert keys == sorted(keys, reverse=True), 'docs/changelog.md lists the newest first'
    installed = importlib.metadata.version('inline_mm')
    assert installed == inline_mm.__version__, (
        f'the installed metadata says {installed}: run `make setup` again; an old '
        '`inline_mm.egg-info` folder at the checkout\'s root shadows it (delete it)')


def test_the_changelog_names_every_moved_path_and_its_removal():
    text = CHANGELOG.read_text()
    named = list(version.MOVED_MODULES) + [f'python -m {c}' for c in version.MOVED_COMMANDS]
    named += [n for names in version.MOVED_NAMES.values() for n in names]
    missing = [p for p in named if f'`{p}`' not in text and f'{p}`' not in text]
    assert not missing, f'docs/changelog.md does not mention {missing}'
    assert f'removed in {version.REMOVED_IN}' in text
