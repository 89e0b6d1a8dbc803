"""The set-up's hand-over of pip's package sources to uv (tools/dev/uv_index_args.py): what pip
would use for ``pip install``, read from its configuration files and ``PIP_*`` in pip's order of
precedence, as ``uv pip install`` arguments; a setting it cannot translate is refused, so that
tools/dev/setup_env.sh falls back to pip. And the self-check's second process."""
import pytest

from support import ROOT, load_script


@pytest.fixture
def pip_config(tmp_path, monkeypatch):
    """Only the returned file configures pip (no machine-wide, user or PIP_* settings)."""
    import os
    for name in list(os.environ):
        if name.startswith('PIP_'):
            monkeypatch.delenv(name)
    for name in ('XDG_CONFIG_DIRS', 'XDG_CONFIG_HOME', 'HOME'):
        monkeypatch.setenv(name, str(tmp_path / 'nowhere'))
    monkeypatch.delenv('VIRTUAL_ENV', raising=False)
    conf = tmp_path / 'pip.conf'
    monkeypatch.setenv('PIP_CONFIG_FILE', str(conf))
    return conf


def _uv_args():
    script = load_script('tools/dev/uv_index_args.py')
    return script.uv_args(script.pip_install_options())


def test_pip_sources_handed_to_uv_with_pips_precedence(pip_config, monkeypatch):
    pip_config.write_text('[global]\nindex-url = https://mirror.example/simple\n'
                          'extra-index-url = file:///srv/a/simple https://b.example/simple\n'
                          'find-links = /srv/wheels\nconstraint = /srv/constraints.txt\n'
                          '[install]\ntrusted-host = b.example\n')
    assert _uv_args() == [
        '--index-strategy', 'unsafe-best-match', '--index-url', 'https://mirror.example/simple',
        '--extra-index-url', 'file:///srv/a/simple', '--extra-index-url', 'https://b.example/simple',
        '--find-links', '/srv/wheels', '--constraint', '/srv/constraints.txt',
        '--allow-insecure-host', 'b.example']
    # PIP_* wins over the files, as it does for pip
    monkeypatch.setenv('PIP_EXTRA_INDEX_URL', 'https://env.example/simple')
    monkeypatch.setenv('PIP_NO_INDEX', '1')
    monkeypatch.setenv('PIP_PRE', '1')
    args = _uv_args()
    assert '--index-url' not in args and '--extra-index-url' not in args
    assert args[:3] == ['--index-strategy', 'unsafe-best-match', '--no-index']
    assert args[-2:] == ['--prerelease', 'allow']


def test_pip_settings_uv_would_miss_are_refused(pip_config, capsys):
    pip_config.write_text('[global]\nproxy = http://proxy.example:3128\n')
    with pytest.raises(SystemExit) as e:
        _uv_args()
    assert e.value.code == 2
    assert '--proxy' in capsys.readouterr().err


def test_nothing_of_this_machine_is_written_into_the_set_up():
    """The machine's pip settings reach uv only through uv_index_args.py at set-up time."""
    text = (ROOT / 'tools/dev/setup_env.sh').read_text()
    for machine_path in ('/opt/', '/etc/xdg', 'file:///'):
        assert machine_path not in text


def test_self_check_runs_named_checks_in_a_second_process(capsys):
    check = load_script('tools/dev/setup_check.py')
    assert check.main(['--only', 'setuptools']) == 0
    assert capsys.readouterr().out.startswith('  ok   setuptools: ')
    assert check.APART and all(c in check.CHECKS for c in check.APART)
