"""The batched path launches the same ops at any batch size and reads nothing back
(``python -m benchmarks --launches``, counted on the CPU: the ops are the device's)."""
import csv

import pytest
import torch

from benchmarks import launches
from benchmarks.__main__ import main
from inline_mm.models import FAMILIES


@pytest.mark.parametrize('name', list(FAMILIES))
def test_batched_path_ops_do_not_grow_with_the_batch_and_nothing_is_read_back(name):
    family = FAMILIES[name]
    model = family.cls(**family.smoke, batched=True).eval()
    for padded in (False, True):
        counted = {b: launches.count(model, launches.make_batch(launches.QUICK_SIZE, b, padded))
                   for b in (2, 8)}
        assert counted[8][0] <= 1.2 * counted[2][0], (padded, counted)
        assert counted[2][1] == counted[8][1] == 0, (padded, counted)
    # The counter sees host reads where there are: the per-sample path reads the sizes.
    model.batched = False
    assert launches.count(model, launches.make_batch(launches.QUICK_SIZE, 2, True))[1] >= 1


def test_padded_sizes_follow_the_stated_rule():
    assert launches.padded_sizes((320, 320), 2) == [(320, 320), (224, 224)]
    assert launches.padded_sizes((320, 640), 8)[-1] == (160, 352)
    x = launches.make_batch((96, 128), 3, True)
    assert not x[2, :, 64:].any() and x[0].ne(0).all()


def test_counter_counts_host_reads_and_restores_tolist():
    original = torch.Tensor.tolist
    with launches.OpCounter() as c:
        t = torch.ones(3) * 2
        t.tolist()
        t.sum().item()
    assert c.reads == 2 and c.ops >= 2
    assert torch.Tensor.tolist is original


@pytest.mark.subprocess       # the machine description runs uname
def test_launches_command_writes_its_table(tmp_path, capsys):
    main(['--launches', '--quick', '--models', 'InLinePVT', '--out-dir', str(tmp_path)])
    out = capsys.readouterr().out
    assert '| InLinePVT | batched |' in out and '| InLinePVT | per-sample |' in out
    rows = list(csv.DictReader(open(tmp_path / 'launches.csv')))
    assert len(rows) == 2 * 5 and {r['path'] for r in rows} == {'batched', 'per-sample'}
