"""Every backbone computes what the official InLine code computes: one test per case of
tests/data/golden/cases.json (tools/dev/make_goldens.py writes the cases and the official
outputs), max relative error 1e-5 in fp32 at every tap the case stores. What is
particular to a family around its goldens (its output norm, its position tables) is in
tests/test_inline_<family>.py."""
import re

import pytest
from conftest import GOLDEN, GOLDEN_CASES, golden_family, golden_run, rel_err

TOL = 1e-5


def test_every_expected_file_has_a_case():
    """A case missing from cases.json would silently go untested."""
    stored = {p.name[:-len('_expected.pth')] for p in GOLDEN.glob('*_expected.pth')}
    assert stored == set(GOLDEN_CASES)


@pytest.mark.parametrize('case', sorted(GOLDEN_CASES))
def test_golden(case):
    family = golden_family(case)
    model, exp, taps, outs = golden_run(case)
    stored = sorted(k for k in exp if re.fullmatch(r'(stage|block)\d+', k))
    assert stored, f'{case}: no taps stored'
    for k in stored:
        assert rel_err(taps[k], exp[k]) <= TOL, k
    if 'final_norm' in exp:
        # the last output is the final norm's tokens as a map, without the tokens that have no
        # place on the map (InLine-DeiT's class token), which lead the official sequence
        tokens = outs[-1].flatten(2).transpose(1, 2)
        prefix = exp['final_norm'].shape[1] - tokens.shape[1]
        assert prefix in (0, 1), prefix
        assert rel_err(tokens, exp['final_norm'][:, prefix:]) <= TOL
    b, _, h, w = exp['input'].shape
    assert len(outs) == len(model.out_indices)
    for out, i, c in zip(outs, model.out_indices, model.out_channels):
        assert out.shape == (b, c, h // family.stride(i), w // family.stride(i)), i
