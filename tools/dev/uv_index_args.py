"""Print, one a line, the ``uv pip install`` arguments that give uv the package sources pip has.

uv reads neither pip's configuration files nor ``PIP_*``: an index, extra indexes, find-links or
a constraint file that a machine gives pip (``pip config list``) would be missing, and uv would
resolve other files or none.  This asks pip's own option parser for the values it would use for
``pip install`` (configuration files and ``PIP_*`` applied, in pip's order of precedence), so
nothing of a particular machine is written into the repository; tools/dev/setup_env.sh runs it
with the new environment's interpreter (whose pip is the one users then run)::

    python tools/dev/uv_index_args.py          # arguments, one a line
    python tools/dev/uv_index_args.py --cert   # pip's CA bundle (for SSL_CERT_FILE), or nothing

``--index-strategy unsafe-best-match`` comes first: pip takes the best version from all its
indexes together, uv by default only from the first index that has the package (here the newest
``setuptools<81`` is only on a later one).  Exits 2, naming the option, when pip has a setting
this does not translate (uv would then not install what pip would).
"""
import sys


def pip_install_options():
    """pip's ``install`` options as pip resolves them from its configuration and ``PIP_*``."""
    try:
        from pip._internal.commands import create_command
    except ImportError as e:    # pip moved its internals: say so rather than guess
        sys.exit(f'uv_index_args: cannot read pip\'s configuration with this pip ({e}); '
                 'set INLINE_MM_INSTALLER=pip to install with pip')
    options, _ = create_command('install').parse_args([])
    return options


def uv_args(options) -> list:
    args = ['--index-strategy', 'unsafe-best-match']
    if options.no_index:
        args.append('--no-index')
    else:
        args += ['--index-url', options.index_url]
        for url in options.extra_index_urls:
            args += ['--extra-index-url', url]
    for where in options.find_links:
        args += ['--find-links', where]
    for path in options.constraints:
        args += ['--constraint', path]
    for host in options.trusted_hosts:
        args += ['--allow-insecure-host', host]
    if options.pre:
        args += ['--prerelease', 'allow']
    untranslated = [name for name, value in (
        ('--no-binary / --only-binary', options.format_control.no_binary
         or options.format_control.only_binary),
        ('--requirement', options.requirements), ('--editable', options.editables),
        ('--proxy', getattr(options, 'proxy', None)),
    ) if value]
    if untranslated:
        print(f'uv_index_args: pip is configured with {", ".join(untranslated)}, which this '
              'does not hand to uv; set INLINE_MM_INSTALLER=pip to install with pip',
              file=sys.stderr)
        sys.exit(2)
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    options = pip_install_options()
    if argv == ['--cert']:
        if options.cert:
            print(options.cert)
        return 0
    if argv:
        sys.exit(f'usage: {sys.argv[0]} [--cert]')
    print('\n'.join(uv_args(options)))
    return 0


if __name__ == '__main__':
    sys.exit(main())
