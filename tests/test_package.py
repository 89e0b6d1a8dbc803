"""The package's shape: dependencies point one way, importing it only registers, and the
engine behaviours are switched on by name (STYLE.md points 11-12).

Imports are read from the source (every ``import`` statement, inside functions too), so a
late import inside a function counts as a dependency like any other.
"""
import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, Set

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / 'inline_mm'


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix('').parts)
    if parts[-1] == '__init__':
        parts = parts[:-1]
    return '.'.join(parts)


def _imports(path: Path, modules: Set[str]) -> Set[str]:
    """The ``modules`` (dotted names) that the file at ``path`` imports."""
    name = _module_name(path)
    package = name if path.name == '__init__.py' else name.rpartition('.')[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split('.')
                base = base[:len(base) - node.level + 1]
                stem = '.'.join(base + ([node.module] if node.module else []))
            else:
                stem = node.module
            # `from pkg import name`: the submodule pkg.name if there is one, else pkg.
            targets = [f'{stem}.{a.name}' if f'{stem}.{a.name}' in modules else stem
                       for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:          # a.b.c -> the module a.b
                target = target.rpartition('.')[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph() -> Dict[str, Set[str]]:
    files = {_module_name(p): p for p in PACKAGE.rglob('*.py')}
    return {name: _imports(path, set(files)) for name, path in files.items()}


def test_no_import_cycle():
    graph = import_graph()
    state: Dict[str, int] = {}            # 1: on the current path, 2: done

    def visit(node, path):
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = path[path.index(nxt):] + [nxt]
                pytest.fail('import cycle: ' + ' -> '.join(cycle))
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])


def test_models_import_nothing_of_the_package_around_them():
    outside = {name: sorted(m for m in deps if not m.startswith('inline_mm.models'))
               for name, deps in import_graph().items() if name.startswith('inline_mm.models')}
    assert not {k: v for k, v in outside.items() if v}


def test_the_padding_map_needs_no_path_decision():
    """``padding.py`` builds the map from the path the backbone chose: it imports nothing of
    ``impl.py`` (which decides it), and ``base.py`` builds no map itself."""
    graph = import_graph()
    assert 'inline_mm.models.impl' not in graph['inline_mm.models.padding']
    base = (PACKAGE / 'models' / 'base.py').read_text()
    assert 'ValidMap(' not in base and 'detect_valid_sizes' not in base


#: the job map of the package (docs/dev/layout.md): one row per top-level entry
LAYOUT = ROOT / 'docs' / 'dev' / 'layout.md'


def _top_level() -> Set[str]:
    return {p.name + ('/' if p.is_dir() else '') for p in PACKAGE.iterdir()
            if p.name not in ('__init__.py', 'version.py', '__pycache__')
            and (p.suffix == '.py' or (p / '__init__.py').is_file())}


def test_the_top_level_is_the_job_map():
    """At most 12 entries beside ``__init__`` and ``version``, each a row of the job map,
    and every row an entry."""
    rows = set(re.findall(r'^\| `([\w./]+)` \|', LAYOUT.read_text(), re.M))
    entries = _top_level()
    assert len(entries) <= 12, sorted(entries)
    assert entries == rows, (f'in inline_mm/ but not in docs/dev/layout.md: {entries - rows}; '
                             f'in the map but not in inline_mm/: {rows - entries}')


def _package_of(module: str) -> str:
    return module.split('.')[1] if module.count('.') else ''


def test_imports_go_the_way_the_job_map_says():
    """Nothing imports ``cli`` or ``app`` from outside them, and ``patches`` (the changes to
    other packages) imports nothing of ``engine`` (which switches them on)."""
    wrong = []
    for name, deps in import_graph().items():
        here = _package_of(name)
        for dep in deps:
            there = _package_of(dep)
            if there in ('cli', 'app') and here != there:
                wrong.append(f'{name} imports {dep}')
            if here == 'patches' and there == 'engine':
                wrong.append(f'{name} imports {dep}')
    assert not wrong


def _calls(attr: str):
    """(module, line) of every call ``X.<attr>(...)`` or ``<attr>(...)`` in the package."""
    for path in PACKAGE.rglob('*.py'):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                f = node.func
                called = f.attr if isinstance(f, ast.Attribute) else getattr(f, 'id', None)
                if called == attr:
                    yield _module_name(path), node.lineno


def test_a_config_enters_and_a_model_is_built_in_one_place():
    """``Config.fromfile`` only in ``read_config``, mmdet's / mmseg's model initialisers only in
    the loader (``inline_mm.apis``)."""
    assert {m for m, _ in _calls('fromfile')} == {'inline_mm.apis.config'}
    initialiser = re.compile(r'from mm(det|seg)\.apis import (init_detector|init_model)')
    builders = {_module_name(p) for p in PACKAGE.rglob('*.py') if initialiser.search(p.read_text())}
    assert builders == {'inline_mm.apis.model'}


def test_one_size_check_for_every_graph():
    """The refusal of another input size is made in one function (``check_size``): no other
    module records a broadcast or a scripted check for it."""
    users = {m for m, _ in _calls('is_in_onnx_export')}
    assert users <= {'inline_mm.models.tracing', 'inline_mm.models.impl'}, users
    size_checks = {m for m, _ in _calls('check_size')} | {m for m, _ in _calls('size_guard')}
    assert size_checks == {'inline_mm.models.tracing', 'inline_mm.models.base',
                           'inline_mm.deploy.backbone'}, size_checks


def test_tools_import_nothing_from_tests():
    tests = {p.stem for p in (ROOT / 'tests').glob('*.py')} | {'tests'}
    loaders = {'spec_from_file_location', 'run_path', 'SourceFileLoader', 'import_module'}
    bad = []
    for path in (ROOT / 'tools').rglob('*.py'):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or '']
            elif isinstance(node, ast.Call):
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, 'id', '')
                text = ast.unparse(node)
                if called in loaders and 'test' in text:
                    bad.append(f'{path.relative_to(ROOT)}: {text}')
            bad += [f'{path.relative_to(ROOT)}: import {n}' for n in names
                    if n.split('.')[0] in tests]
    assert not bad


def test_nothing_edits_sys_path():
    """Tools, tests and benchmarks import the package (STYLE.md point 1): no path inserts."""
    bad = []
    for part in ('inline_mm', 'tools', 'tests', 'benchmarks'):
        for path in (ROOT / part).rglob('*.py'):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Attribute) and ast.unparse(node) == 'sys.path' \
                        and not isinstance(getattr(node, 'ctx', None), ast.Load):
                    bad.append(f'{path.relative_to(ROOT)}:{node.lineno}')
                elif isinstance(node, ast.Call) and ast.unparse(node.func) in (
                        'sys.path.insert', 'sys.path.append', 'sys.path.extend'):
                    bad.append(f'{path.relative_to(ROOT)}:{node.lineno}')
    assert not bad


def test_user_tools_are_wrappers_of_the_console_scripts():
    """Each console script's tool in tools/ only calls the package's ``main`` (the wheel and
    the checkout run the same code)."""
    import configparser
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / 'setup.cfg')
    scripts = dict(line.split(' = ') for line in
                   cfg['options.entry_points']['console_scripts'].strip().splitlines())
    modules = {target.split(':')[0] for target in scripts.values()} - {'inline_mm.cli.weights'}
    wrappers = {}
    for path in (ROOT / 'tools').rglob('*.py'):
        text = path.read_text()
        for module in modules:
            if f'from {module} import main' in text:
                wrappers[module] = path
                assert len(ast.parse(text).body) <= 4, path      # docstring, imports, __main__
    assert set(wrappers) == modules


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, '-c', textwrap.dedent(code)], capture_output=True,
                         text=True, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout + out.stderr


SNAPSHOT = '''
    import sys
    import mmengine.dist.utils as dist_utils
    import mmengine.runner.runner as runner_module
    from mmengine.hooks import CheckpointHook
    from mmengine.runner import Runner

    def snapshot():
        return (dict(vars(Runner)), dict(vars(CheckpointHook)), dist_utils._init_dist_pytorch,
                runner_module.find_latest_checkpoint)
'''


def test_only_the_app_page_imports_gradio():
    """Gradio is the ``app`` extra: one module of the package imports it (the page), and
    nothing imports that module but the app's entry point."""
    importers = set()
    for path in PACKAGE.rglob('*.py'):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ''] if isinstance(node, ast.ImportFrom) and not node.level else []
            if any(n.split('.')[0] == 'gradio' for n in names):
                importers.add(_module_name(path))
    assert importers == {'inline_mm.app.ui'}
    users = {name for name, deps in import_graph().items() if 'inline_mm.app.ui' in deps}
    assert users == {'inline_mm.app.__main__'}


@pytest.mark.subprocess
def test_bare_import_leaves_mmengine_untouched():
    _run(SNAPSHOT + '''
    before = snapshot()
    import inline_mm
    after = snapshot()
    for a, b in zip(before, after):
        if isinstance(a, dict):
            changed = [k for k in set(a) | set(b) if a.get(k) is not b.get(k)]
            assert not changed, changed
        else:
            assert a is b, (a, b)
    # of the patch table, the import adds only its own row (the allowlist, named in the README)
    from inline_mm.patches import table as patches
    from inline_mm.patches import AT_IMPORT, AT_START
    table = patches()
    on = {p.name for p in table if p.active()}
    assert on - {p.name for p in table if p.switched_on_by == AT_START} == \\
        {p.name for p in table if p.switched_on_by == AT_IMPORT}, on

    # the web app's Gradio (an optional extra) loads when the app starts, not before
    import inline_mm.app.viewer, inline_mm.visualization.attention_views  # noqa: E401
    assert not {'gradio', 'fastapi', 'uvicorn', 'playwright'} & set(sys.modules)

    import inline_mm.engine.enable     # switched on by name: now they change
    assert inline_mm.engine.installed()
    assert Runner.wrap_model is not before[0]['wrap_model']
    assert CheckpointHook._save_checkpoint_with_step is not \\
        before[1]['_save_checkpoint_with_step']
    ''')


@pytest.mark.subprocess
def test_frameworks_without_any_mmcv_say_what_to_install():
    """mmdet/mmseg installed but neither mmcv-lite nor a compiled mmcv: the import names the
    two ways out instead of failing deep inside mmdet with "No module named 'mmcv'"."""
    out = subprocess.run([sys.executable, '-c', textwrap.dedent('''
    import sys
    sys.modules['mmcv'] = None             # as if no mmcv distribution were installed
    import inline_mm
    ''')], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith('ImportError: mmdet is installed but mmcv is not importable'), last
    assert 'mmcv-lite==2.1.0' in last and 'INLINE_MM_MMCV=full make setup' in last
