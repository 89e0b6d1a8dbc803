"""Which form of InLine attention runs is chosen in one place (``inline_mm.models.impl``):
the environment is read when a module is built, the path at a forward by
``choose_path`` alone, and a module the kernel cannot run says so from its build."""
import ast
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import inline_mm
from inline_mm.models import InLineAttention
from inline_mm.models.impl import IMPL_ENV, choose_path
from support import smoke_backbone

PACKAGE = Path(inline_mm.__file__).parent

#: every place in the package that touches the choice, and why it may
EXPECTED = {
    # the environment: read when a module is built (check_impl), and by the report
    ('models/impl.py', 'check_impl', 'env'),
    ('env.py', 'describe_impl', 'env'),
    # the one deciding function, and who asks it: the backbone once per forward (its
    # map's sizes), each attention for its call, the report for each device type
    ('models/impl.py', 'choose_path', 'device'),
    ('models/base.py', 'InLineBackbone.valid_map', 'choose_path'),
    ('models/attention.py', 'InLineAttention.uses_kernel', 'choose_path'),
    ('env.py', 'describe_impl', 'choose_path'),
    # not a path: whether a device type has bf16 units (the app's and benchmark's one check)
    ('env.py', 'bf16_support', 'device'),
    # the setting itself: kept, shown, set, handed to choose_path
    ('models/attention.py', 'InLineAttention.uses_kernel', 'impl'),
    ('models/attention.py', 'InLineAttention.extra_repr', 'impl'),
    ('models/base.py', 'using_impl', 'impl'),
    ('models/base.py', 'InLineBackbone._finish_init', 'impl'),
    ('models/base.py', 'InLineBackbone.extra_repr', 'impl'),
    ('models/base.py', 'InLineBackbone.impl', 'impl'),
    ('models/base.py', 'InLineBackbone.batched', 'impl'),
    ('models/base.py', 'InLineBackbone.valid_map', 'impl'),
}


def _touches(path: Path, root: Path = PACKAGE):
    """``(file, function, what)`` for each read of ``$INLINE_MM_IMPL`` (``env``), call of
    ``choose_path``, read of an ``impl`` attribute, or test of a device type against
    ``'cpu'`` (``device``: how a path is told from a device) in ``path``."""
    found, scope = set(), []
    where = path.relative_to(root).as_posix()

    class Visitor(ast.NodeVisitor):
        def visit_FunctionDef(self, node):
            scope.append(node.name)
            self.generic_visit(node)
            scope.pop()
        visit_AsyncFunctionDef = visit_ClassDef = visit_FunctionDef

        def note(self, what):
            found.add((where, '.'.join(scope), what))

        def visit_Name(self, node):
            if node.id == 'IMPL_ENV' and isinstance(node.ctx, ast.Load):
                self.note('env')
            if node.id == 'choose_path' and isinstance(node.ctx, ast.Load):
                self.note('choose_path')

        def visit_Constant(self, node):
            if node.value == IMPL_ENV and scope:       # (its definition is module level)
                self.note('env')

        def visit_Attribute(self, node):
            if node.attr in ('impl', '_impl') and isinstance(node.ctx, ast.Load):
                self.note('impl')
            if node.attr == 'choose_path':
                self.note('choose_path')
            if node.attr == 'is_cpu':
                self.note('device')
            self.generic_visit(node)

        def visit_Compare(self, node):
            if any(isinstance(n, ast.Constant) and n.value == 'cpu'
                   for n in [node.left, *node.comparators]):
                self.note('device')
            self.generic_visit(node)

    Visitor().visit(ast.parse(path.read_text(), str(path)))
    return found


def test_the_path_is_decided_in_one_place():
    """An AST scan of the package: the environment variable, the deciding function, the
    ``impl`` setting and a device type told from ``'cpu'`` appear where listed above
    (one more place that reads or decides fails here, and names itself)."""
    found = set().union(*(_touches(p) for p in sorted(PACKAGE.rglob('*.py'))))
    # Outside the choice: DDP's device_ids (wherever the patch lives), not InLine attention.
    found -= {t for t in found if t[1:] == ('install.wrap_model', 'device')}
    assert found - EXPECTED == set(), 'a new place reads or decides the path'
    assert EXPECTED - found == set(), 'a listed place is gone: update EXPECTED'


def test_the_scan_sees_a_second_decider(tmp_path):
    """What the scan above relies on: each kind of read is seen."""
    code = tmp_path / 'extra.py'
    code.write_text('import os\n'
                    'def forward(self, x):\n'
                    "    a = os.environ.get('INLINE_MM_IMPL')\n"
                    '    b = choose_path(self.impl, x)\n'
                    "    return x.device.type == 'cpu' or x.is_cpu\n")
    assert _touches(code, tmp_path) == {
        ('extra.py', 'forward', what) for what in ('env', 'impl', 'choose_path', 'device')}


def test_the_environment_is_read_at_build(monkeypatch):
    """``$INLINE_MM_IMPL`` is read when a model is built: changing it afterwards changes
    no path; a model built under it takes it (the attention alone, and a backbone with
    its attentions and its padding map)."""
    x = torch.randn(2, 20, 32)
    padded = torch.zeros(2, 3, 64, 64)
    padded[0].normal_()
    padded[1, :, :48, :40].normal_()
    monkeypatch.setenv(IMPL_ENV, 'plain')
    attn, model = InLineAttention(32, 2), smoke_backbone('InLineSwin')
    monkeypatch.setenv(IMPL_ENV, 'kernel')
    assert attn.impl == model.impl == 'plain' and not attn.uses_kernel(x)
    assert model.valid_map(padded).sizes is None                    # sizes on the device
    assert not any(m.uses_kernel(x) for m in model.modules() if isinstance(m, InLineAttention))
    # Built now, under 'kernel': the kernel on the CPU, whatever comes after.
    attn, model = InLineAttention(32, 2), smoke_backbone('InLineSwin')
    monkeypatch.setenv(IMPL_ENV, 'plain')
    assert attn.impl == model.impl == 'kernel' and attn.uses_kernel(x)
    assert model.valid_map(padded).sizes == [(64, 64), (48, 40)]     # read to the host
    monkeypatch.delenv(IMPL_ENV)
    assert InLineAttention(32, 2).impl == 'auto' and attn.impl == 'kernel'


def test_the_path_follows_the_input_and_capture():
    """``choose_path``: ``'auto'`` by the input's device; a given ``impl`` as given; the
    plain form while a program is captured (here, an FX proxy)."""
    cpu, meta = torch.zeros(1), torch.zeros(1, device='meta')
    assert [choose_path('auto', cpu), choose_path('auto', meta)] == ['kernel', 'plain']
    assert [choose_path('kernel', meta), choose_path('plain', cpu)] == ['kernel', 'plain']
    proxy = torch.fx.Proxy(torch.fx.Graph().placeholder('x'))
    assert choose_path('kernel', proxy) == 'plain'


class LowRankLinear(nn.Linear):
    """Another projection type: its weight alone is not what it computes."""

    def forward(self, x):
        return super().forward(x) + 1


@pytest.mark.parametrize('switches, named', [
    (dict(kernel='relu'), ('kernel',)), (dict(attention='linear'), ('attention',)),
    (dict(window_size=2), ('window_size',)),
    (dict(kernel='exp', window_size=2), ('kernel', 'window_size'))])
def test_a_module_the_kernel_cannot_run_says_so_at_build(switches, named):
    """The paper's switches the kernel does not serve are named by ``plain_only`` (and
    in the repr) from the build; the forward reads that, not the switches again."""
    x = torch.randn(2, 16, 32)
    attn = InLineAttention(32, 2, impl='kernel', **switches)
    assert attn.plain_only == named and f'plain_only={named}' in repr(attn)
    assert not attn.uses_kernel(x)
    released = InLineAttention(32, 2, impl='kernel')
    assert released.plain_only == () and 'plain_only' not in repr(released)
    assert released.uses_kernel(x)
    released.plain_only = ('set by hand',)       # the fact is what the forward reads
    assert not released.uses_kernel(x)


def test_another_projection_type_is_named_from_when_it_is_set():
    x = torch.randn(2, 16, 32)
    attn = InLineAttention(32, 2, impl='kernel')
    attn.qkv = LowRankLinear(32, 96)
    assert attn.plain_only == ('qkv',) and not attn.uses_kernel(x)
    attn.qkv = nn.Linear(32, 96)
    assert attn.plain_only == () and attn.uses_kernel(x)
    attn.kernel = 'relu'                           # a switch set by hand after the build
    assert attn.plain_only == ('kernel',)
    # The kernel would be wrong for another type: the plain form runs its forward.
    attn = InLineAttention(32, 2, impl='kernel', proj=False)
    ours = attn(x, (4, 4), projection=LowRankLinear(32, 96))
    assert not attn.uses_kernel(x, projection=LowRankLinear(32, 96))
    assert ours.shape == x.shape


def test_a_backbones_switched_blocks_say_so_at_build():
    model = smoke_backbone('InLineSwin', impl='kernel', inline_cfg=dict(kernel='relu'))
    inline = [m for m in model.modules() if isinstance(m, InLineAttention)]
    assert inline and all(m.plain_only == ('kernel',) for m in inline)
