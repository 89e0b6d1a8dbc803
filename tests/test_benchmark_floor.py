"""python -m benchmarks --floor and tools/benchmark.py: the CI-sized runs end to end (no
timing is asserted: the machine is shared). The module and its own linears are timed in
every mode, the profile of what the attention adds is printed and written, and
tools/benchmark.py runs all three comparisons of docs/performance.md."""
import csv
import json
import subprocess
import sys

import pytest
import torch
from support import ROOT, run_quick_benchmark, subprocess_env

from benchmarks import floor


@pytest.mark.subprocess
def test_quick_floor_run_times_module_and_linears_and_profiles_the_rest(tmp_path):
    out = run_quick_benchmark(tmp_path, '--floor')
    assert 'InLineAttention against its own qkv + proj linears' in out
    assert 'What the attention adds to its linears, by aten op' in out
    with open(tmp_path / 'floor.csv') as f:
        rows = list(csv.DictReader(f))
    assert {(int(r['channels']), int(r['heads']), int(r['height']), r['step'])
            for r in rows} == {(c, h, s, step) for c, h, s in floor.QUICK_CASES
                               for step in floor.STEPS}
    for r in rows:
        assert 0 < float(r['min_ms']) <= float(r['median_ms']) <= float(r['max_ms']), r
        assert float(r['cpu_median_ms']) > 0 and r['runs'] == '2', r
    # a table row per case, with both ratios
    table = [line for line in out.splitlines() if line.startswith('cpu ')]
    assert len(table) == len(floor.QUICK_CASES) and all(line.count('x') >= 4 for line in table)
    with open(tmp_path / 'floor_profile.csv') as f:
        prof = list(csv.DictReader(f))
    assert {r['mode'] for r in prof} == {'forward', 'forward+backward'}
    assert all(r['op'].startswith('aten::') for r in prof)
    # the local 3x3 term is the attention's, not the linears': it shows up as added
    assert any('conv' in r['op'] and float(r['added_ms']) > 0 for r in prof), prof
    assert json.loads((tmp_path / 'meta.json').read_text())['arguments']['floor'] is True


@pytest.mark.parametrize('impl', ['kernel', 'plain'])
def test_floor_steps_are_the_module_and_its_own_linears(impl):
    """The module step runs the module (a hook on qkv fires only on the plain form: the
    kernel folds the projection into its own products) and the linears step its own
    linears."""
    from inline_mm.models.attention import InLineAttention
    torch.manual_seed(0)
    attn = InLineAttention(32, 2, impl=impl)
    x, grad = torch.randn(1, 36, 32), torch.randn(1, 36, 32)
    steps = floor._steps(attn, x, grad, (6, 6))
    assert tuple(steps) == floor.STEPS
    calls = []
    hooks = [m.register_forward_hook(lambda m, i, o, name=name: calls.append(name))
             for name, m in attn.named_children() if name in ('qkv', 'proj', 'residual')]
    steps['linears forward']()
    assert calls == ['qkv', 'proj']
    calls.clear()
    steps['module forward+backward']()
    assert calls == (['residual', 'proj'] if impl == 'kernel' else ['qkv', 'residual', 'proj'])
    assert all(p.grad is None for p in attn.parameters())       # freed after each step
    for h in hooks:
        h.remove()


@pytest.mark.subprocess
@pytest.mark.slow
def test_tools_benchmark_runs_the_three_comparisons(tmp_path):
    proc = subprocess.run([sys.executable, 'tools/benchmark.py', '--quick', '--out-dir',
                           str(tmp_path)], capture_output=True, text=True, cwd=ROOT,
                          env=subprocess_env(), timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    for part, table in (('padding', 'aware/plain'),
                        ('floor', 'InLineAttention against its own qkv + proj linears'),
                        ('deploy', '| InLine-Swin-T / Swin-T | onnxruntime |')):
        assert f'======== {part}: python -m benchmarks' in out, part
        assert table in out, part
    for path in ('padding/padding.csv', 'floor/floor.csv', 'floor/floor_profile.csv',
                 'deploy/deploy.csv', 'padding/meta.json', 'floor/meta.json',
                 'deploy/meta.json'):
        assert (tmp_path / path).is_file(), path


@pytest.mark.subprocess
def test_tools_benchmark_refuses_bad_arguments(tmp_path):
    for argv, says in ((['--only', 'speed'], 'invalid choice'),
                       (['--repeats', '0'], '--repeats must be >= 1')):
        proc = subprocess.run([sys.executable, 'tools/benchmark.py', *argv], capture_output=True,
                              text=True, cwd=ROOT, env=subprocess_env(), timeout=120)
        assert proc.returncode == 2 and says in proc.stderr, proc.stderr


def test_floor_under_torch_compile_times_the_compiled_module_and_linears(capsys):
    """``--compile-backend``: both compiled (graph capture here, to stay seconds), no
    profile (the ops run inside the compiled graph)."""
    torch._dynamo.reset()
    rows, prof = floor.run_floor([(32, 2, 8)], repeats=2, warmup=0, device=torch.device('cpu'),
                                 backend='aot_eager')
    assert prof == [] and {r['compiled'] for r in rows} == {'aot_eager'}
    assert {r['step'] for r in rows} == set(floor.STEPS)
    assert 'both under torch.compile (backend aot_eager)' in floor.floor_table(rows)
