"""Run timm's own model tests (``tests/test_models.py`` of a timm checkout) against the
``inline_*`` models of ``inline_mm.timm``; fetches nothing.

    git clone --branch v$(python -c "import timm; print(timm.__version__)") \
        https://github.com/huggingface/pytorch-image-models /tmp/timm-src
    python tools/dev/run_timm_model_tests.py /tmp/timm-src [pytest arguments...]

timm's file is not part of this project: it is copied into a temporary folder next to a
``conftest.py`` that imports ``inline_mm.timm`` (its models must be registered before the
file lists models at import), and changed in two lists only, to select our models as timm
selects its own of the same kind:

* ``NON_STD_FILTERS`` gains ``inline_deit_*``: InLine-DeiT is a ViT (``forward_features``
  gives tokens with a class token), and timm files its own ``deit*`` / ``vit_*`` there, so
  it gets ``test_model_default_cfgs_non_std`` instead of the NCHW-map checks;
* ``FEAT_INTER_FILTERS`` gains ``timm`` (the module name timm records for models
  registered in ``inline_mm/timm.py``), so the ``forward_intermediates`` tests run.

Only ``inline_*`` models run (``-k inline``).  The tests that do not apply are listed,
with the reasons, in docs/export_and_timm.md (timm section); pass ``--deselect`` or
``-m`` to narrow further, e.g. ``-m "not fxforward and not fxbackward and not torchscript"``.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CONFTEST = '''
import inline_mm.timm  # noqa: F401  (registers the inline_* models before collection)
'''


def patched(source: str) -> str:
    """timm's test file with our models filed in its selection lists."""
    for name, entry in (('NON_STD_FILTERS', "'inline_deit_*'"), ('FEAT_INTER_FILTERS', "'timm'")):
        source, n = re.subn(rf'^{name} = \[', f'{name} = [{entry}, ', source, count=1,
                            flags=re.M)
        if not n:
            raise SystemExit(f'{name} not found in the test file: another timm layout')
    return source


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split('\n\n')[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog='Arguments after the checkout go to pytest, e.g. -k "inline and fx".')
    parser.add_argument('checkout', type=Path, help='the root of a timm checkout')
    args, extra = parser.parse_known_args(argv)
    test_file = args.checkout / 'tests' / 'test_models.py'
    if not test_file.is_file():
        raise SystemExit(f'{test_file} not found: pass the root of a timm checkout')
    with tempfile.TemporaryDirectory(prefix='timm-tests-') as tmp:
        tmp = Path(tmp)
        (tmp / 'test_models.py').write_text(patched(test_file.read_text()))
        (tmp / 'conftest.py').write_text(CONFTEST)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(ROOT)] + [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p]))
        cmd = [sys.executable, '-m', 'pytest', '-p', 'no:cacheprovider', '-q', '-rs',
               '--rootdir', str(tmp), str(tmp / 'test_models.py'), '-k', 'inline', *extra]
        print(' '.join(cmd), flush=True)
        return subprocess.call(cmd, cwd=tmp, env=env)


if __name__ == '__main__':
    sys.exit(main())
