#!/usr/bin/env python
"""Check every citation of the recipe table against local copies of the cited repositories.

    python tools/dev/check_citations.py tests/config_spec.py \\
        --agent /path/Agent-Attention --mlla /path/MLLA --vittt /path/ViTTT \\
        [--inline /path/InLine] [--mmdet DIR] [--mmseg DIR]

The recipe table (``tests/config_spec.py``) cites, for each value of the shipped configs,
``<repository>@<commit> <path>`` or ``mmdet 3.3.0 configs/<path>``, with ``{a,b}`` for
alternatives. This tool expands every pattern, reads each file at the cited commit and
looks for the row's value in it (``lr=1e-4``, ``drop_path_rate=0.1``, ``samples_per_gpu=2``,
...), reading a source as the table's docstring says: citations outside parentheses say the
value (each file must hold it), those in parentheses or in an ``ours: ...`` source are
context (each file must exist), and a citation followed by a `backquoted` text must hold
that text. It prints one line per distinct (field, value, source) and per citation, and a
summary; exit status 1 if a file is missing or does not say what is cited. The output of a
run is in docs/dev/recipes.md.

A repository path may be a git directory (a clone, or a bare mirror): files are then read
at the cited commit (``git show <commit>:<path>``), and a commit missing from it is an
error. Any other directory is taken as an export of the cited commit, as given. mmdet and
mmseg citations are read from the installed packages' configs (``<package>/.mim/configs``)
when their version is the cited one, or from ``--mmdet`` / ``--mmseg``; a repository not
given is reported as not checked. Nothing is fetched: CI has no network, and this is a
developer tool, not a test.

The table is an input, named by its path: it is the config tests' spec and stays there
(one home); the tool runs that file (``runpy.run_path``) and reads its ``cited()``, as it
reads the repositories' files, without importing the tests package or putting tests/ on
the import path.
"""
import argparse
import datetime
import math
import os.path as osp
import re
import runpy
import subprocess
import sys
from itertools import product

_PATH = r'(?:[^\s,;(){}]|\{[^{}\s]*\})+?'     # a path, with {a,b} alternatives
CITATION = re.compile(
    rf'(?P<repo>LeapLabTHU/[\w.-]+)@(?P<commit>[0-9a-f]{{40}}) (?P<path>{_PATH}\.(?:py|yaml))'
    rf'|(?P<pkg>mmdet|mmseg) (?P<version>\d+\.\d+\.\d+) configs/(?P<ppath>{_PATH}\.py)')
LITERAL = re.compile(r'\s*`([^`]+)`')
NUM = r'([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)'
OPTIONS = {'LeapLabTHU/Agent-Attention': 'agent', 'LeapLabTHU/MLLA': 'mlla',
           'LeapLabTHU/ViTTT': 'vittt', 'LeapLabTHU/InLine': 'inline'}


def expand(pattern: str) -> list:
    """``a_{t,s}_{1x,3x}.py`` -> every combination, in order."""
    parts = re.split(r'\{([^{}]*)\}', pattern)
    choices = [[p] if i % 2 == 0 else p.split(',') for i, p in enumerate(parts)]
    return [''.join(c) for c in product(*choices)]


# --- reading a cited file ------------------------------------------------------------------
class Source:
    """Where the files of one repository (or package) come from."""

    def __init__(self, root: str, commit: str = None):
        self.root, self.commit, self.git = root, commit, None
        if root and commit:
            for args in (['--git-dir', root], ['-C', root]):
                if subprocess.run(['git', *args, 'rev-parse', '--git-dir'],
                                  capture_output=True).returncode == 0:
                    self.git = args
                    break

    def describe(self) -> str:
        if not self.root:
            return 'not given: not checked'
        if self.git:
            ok = self._git('cat-file', '-e', f'{self.commit}^{{commit}}') is not None
            return (f'{self.root} (git; files read at the cited commit)' if ok else
                    f'{self.root} (git; the cited commit {self.commit} is NOT in it)')
        return (f'{self.root} (a directory, taken as the cited commit)' if self.commit else
                f'{self.root} (its configs)')

    def _git(self, *args):
        out = subprocess.run(['git', *self.git, *args], capture_output=True)
        return out.stdout.decode('utf-8', 'replace') if out.returncode == 0 else None

    def read(self, path: str):
        """The file's text, or None where it does not exist."""
        if self.git:
            return self._git('show', f'{self.commit}:{path}')
        full = osp.join(self.root, path)
        return open(full, encoding='utf-8').read() if osp.isfile(full) else None


# --- finding a field's value in a config file ----------------------------------------------
def _nums(key: str, text: str) -> list:
    return [float(v) for v in re.findall(rf'\b{key}\s*[=:]\s*{NUM}', text, re.I)]


def _pairs(key: str, text: str) -> list:
    return [(float(a), float(b)) for a, b in
            re.findall(rf'\b{key}\s*=\s*\(\s*{NUM}\s*,\s*{NUM}\s*\)', text)]


def _warmup(text):
    if 'warmup' not in text:
        return [None]
    return list(zip(_nums('warmup_iters', text), _nums('warmup_ratio', text)))


def _betas(text):
    found = _pairs('betas', text)
    return found or ([(0.9, 0.999)] if 'AdamW' in text else [])   # torch's AdamW default


def _no_decay(text):
    if re.search(r"'norm'\s*:\s*dict\(decay_mult=0", text) and re.search(
            r"'(relative_position_bias_table|absolute_pos_embed)'\s*:\s*dict\(decay_mult=0",
            text):
        return ['norms and position tables']
    return ['nothing'] if 'decay_mult' not in text and 'paramwise' not in text else []


def _pipeline(text):
    multi = bool(re.search(r'\(480,\s*1333\)', text))
    if multi and 'RandomCrop' in text and re.search(r'crop_size=\(384,\s*600\)', text):
        return ['ms-crop']
    return ['single-scale'] if not multi and 'RandomCrop' not in text else []


def _target_stds(text):
    firsts = [float(m) for m in re.findall(rf'target_stds\s*=\s*\[\s*{NUM}', text)]
    return [firsts[i:i + 3] for i in range(len(firsts))]


def _aux(text):
    if 'auxiliary_head' not in text:
        return [None]
    block = text[text.index('auxiliary_head'):]
    found = [_nums(k, block)[:1] for k in ('in_index', 'channels', 'loss_weight')]
    return [tuple(f[0] for f in found)] if all(found) else []


def _amp(text):
    keeps = 'AmpOptimWrapper' in text and not re.search(r'\blr\s*=|optimizer\s*=', text)
    return ["the parent's"] if keeps else []


FINDERS = {
    'optimizer': lambda t: re.findall(r"type\s*=\s*['\"](\w+)['\"]", t),
    'lr': lambda t: _nums('lr', t),
    'weight_decay': lambda t: _nums('weight_decay', t),
    'betas': _betas,
    'layer_decay': lambda t: _nums('layer_decay_rate', t) if 'layer_decay' in t else [None],
    'gpus': lambda t: [float(v) for v in re.findall(r'(\d+) GPUs', t)],
    'batch_per_gpu': lambda t: _nums('samples_per_gpu', t) + _nums('batch_size', t),
    'batch_size': lambda t: _nums('samples_per_gpu', t) + _nums('batch_size', t),
    'warmup': _warmup,
    'test_scale': lambda t: _pairs('img_scale', t) + _pairs('scale', t),
    'grad_clip': lambda t: [None] if 'grad_clip=None' in t or 'clip' not in t else [],
    'neck_out': lambda t: _nums('out_channels', t),
    'channels': lambda t: _nums('channels', t),
    'cascade_target_stds': _target_stds,
    'amp_optimizer': _amp,
    'no_decay': _no_decay,
    'max_epochs': lambda t: _nums('max_epochs', t),
    'milestones': lambda t: [[float(v) for v in m.split(',')] for m in
                             re.findall(r'\b(?:step|milestones)\s*=\s*\[([^\]]*)\]', t)],
    'train_pipeline': _pipeline,
    'power': lambda t: _nums('power', t),
    'eta_min': lambda t: _nums('min_lr', t) + _nums('eta_min', t),
    'poly_begin': lambda t: [0.] if "policy='poly'" in t else [],   # mmcv's poly: from 0
    'max_iters': lambda t: _nums('max_iters', t),
    'aux': _aux,
    'crop': lambda t: _pairs('crop_size', t),
    'drop_path_rate': lambda t: _nums('drop_path_rate', t),
}


def same(a, b) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-9)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def _short(v):
    return f'{v:g}' if isinstance(v, float) else repr(v)


# --- one source ----------------------------------------------------------------------------
def citations(source: str):
    """(citation match, saying the value?, literal or None) for each citation of a source."""
    ours = source.startswith('ours: ')
    for m in CITATION.finditer(source):
        depth = source[:m.start()].count('(') - source[:m.start()].count(')')
        lit = LITERAL.match(source, m.end())
        yield m, not ours and depth == 0, lit.group(1) if lit else None


def check(field, value, source, sources: dict, out) -> tuple:
    """Print the checks of one row; (files read, failures)."""
    read = failures = 0
    for m, says, literal in citations(source):
        if m.group('repo'):
            key, name, pattern = ((m.group('repo'), m.group('commit')),
                                  f"{m.group('repo').split('/')[1]}@{m.group('commit')[:7]}",
                                  m.group('path'))
        else:
            key, name, pattern = ((m.group('pkg'), m.group('version')),
                                  f"{m.group('pkg')} {m.group('version')}",
                                  'configs/' + m.group('ppath'))
        src = sources.get(key)
        if src is None or not src.root:
            out(f'    -- {name} {pattern}: not checked (no copy given)')
            continue
        notes = []
        for path in expand(pattern):
            text = src.read(path if m.group('repo') else path[len('configs/'):])
            if text is None:
                notes.append(f'MISSING {path}')
                failures += 1
                continue
            read += 1
            if literal is not None:
                if re.sub(r'\s', '', literal) not in re.sub(r'\s', '', text):
                    notes.append(f'`{literal}` NOT in {osp.basename(path)}')
                    failures += 1
            elif says:
                finder = FINDERS.get(field)
                found = finder(text) if finder else []
                if not any(same(f, value) for f in found):
                    notes.append(f'{field}={_short(value)} NOT in {osp.basename(path)} '
                                 f"(found: {', '.join(_short(f) for f in found) or 'none'})")
                    failures += 1
        n = len(expand(pattern))
        what = (f'`{literal}` in each' if literal is not None else
                f'{field}={_short(value)} in each' if says else 'exist (context)')
        status = 'FAIL' if notes else 'ok  '
        out(f'    {status} {name} {pattern}: {n} file{"s" * (n > 1)}, {what}')
        for note in notes:
            out(f'         {note}')
    return read, failures


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('table', help='the recipe table, tests/config_spec.py')
    for opt in ('agent', 'mlla', 'vittt'):
        p.add_argument(f'--{opt}', required=True, metavar='DIR',
                       help=f'local copy (git directory or export) of LeapLabTHU/{opt}')
    p.add_argument('--inline', metavar='DIR', help='local copy of LeapLabTHU/InLine')
    p.add_argument('--mmdet', metavar='DIR', help="mmdet's configs/ (default: installed)")
    p.add_argument('--mmseg', metavar='DIR', help="mmseg's configs/ (default: installed)")
    args = p.parse_args(argv)
    rows = list(runpy.run_path(args.table)['cited']())

    sources = {}
    for _, _, _, source in rows:
        for m, _, _ in citations(source):
            if m.group('repo'):
                key = (m.group('repo'), m.group('commit'))
                root = getattr(args, OPTIONS.get(m.group('repo'), ''), None)
                sources.setdefault(key, Source(root, m.group('commit')))
            else:
                key = (m.group('pkg'), m.group('version'))
                if key not in sources:
                    sources[key] = Source(getattr(args, m.group('pkg')) or
                                          _installed(*key))
    out = print
    out(f'check_citations, {datetime.date.today().isoformat()}: {args.table}')
    for (repo, rev), src in sorted(sources.items()):
        out(f'  {repo}@{rev}: {src.describe()}')
    seen, read, failures, said = {}, 0, 0, 0
    for where, field, value, source in rows:
        seen.setdefault((field, repr(value), source), (value, []))[1].append(where)
    for (field, _, source), (value, wheres) in seen.items():
        where = wheres[0] + (f' (+{len(wheres) - 1} alike)' if len(wheres) > 1 else '')
        out(f'{where}' + (f' {field} = {_short(value)}' if field else ''))
        r, f = check(field, value, source, sources, out)
        read, failures = read + r, failures + f
        said += any(s for _, s, _ in citations(source))
    out(f'{len(seen)} distinct rows ({said} with files that say the value), {read} files '
        f'read, {failures} failure(s)')
    return 1 if failures else 0


def _installed(pkg: str, version: str):
    try:
        module = __import__(pkg)
    except ImportError:
        return None
    configs = osp.join(osp.dirname(module.__file__), '.mim', 'configs')
    return configs if module.__version__ == version and osp.isdir(configs) else None


if __name__ == '__main__':
    sys.exit(main())
