"""Official weights by name or URL (inline_mm.models.weights), against a real HTTP server.

The server runs on 127.0.0.1 in a thread of the test process and is stopped by each test;
nothing else is reached.  It emulates the authors' host as its links behave (the real
host cannot be reached here): ``/f/<id>/?dl=1`` answers with a redirect to the file,
``/f/<id>/`` without ``dl=1`` with an HTML page, and files are served with HTTP Range.
It misbehaves on request: drops the connection mid-body, ignores Range, omits
Content-Length, stalls before answering, or paces the body so that two processes overlap.
The files it serves are small checkpoints of each family's layout (official
``{'model': ...}`` files from tests/data/golden, or narrow models of a preset's depths).
"""
import hashlib
import http.server
import io
import os
import re
import runpy
import subprocess
import sys
import threading
import time
import urllib.parse
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from conftest import GOLDEN, shrink_backbone
from inline_mm.models import weights
from inline_mm.models import FAMILIES, InLinePVT, InLineSwin, load_pretrained
from inline_mm.cli import weights as weights_cli
from inline_mm.models.weights import SCHEME, WeightsError

ROOT = Path(__file__).resolve().parents[1]
#: InLine-Swin-T's depths and layout at 16 channels: a file that passes as inline://swin_t
NARROW_SWIN_T = dict(embed_dims=16, depths=(2, 2, 6, 2), num_heads=(1, 2, 4, 8),
                     stage_types=('inline', 'inline', 'inline', 'softmax'))
#: the layout of tests/data/golden/inline_swin_tiny_224.pth (official format)
GOLDEN_SWIN = dict(embed_dims=16, depths=(2, 2, 2, 2), num_heads=(1, 2, 4, 8),
                   stage_types=('inline', 'inline', 'inline', 'softmax'))
LINK = 'a1b2c3d4e5f6a7b8c9d0'          # an official-looking link id


class Host(http.server.ThreadingHTTPServer):
    """The weights' host on 127.0.0.1 (see the module docstring), with switchable faults.

    Files live in ``files`` (name -> bytes), served at ``/files/<name>`` and, for the
    mirror, at ``/mirror/<name>``; ``links`` maps a link id to a file name.  Every
    request is logged as ``(path, Range header)`` in ``requests``; a request in absolute
    form (what clients send to a proxy) keeps its ``http://host`` in the path.
    """

    daemon_threads = True

    def __init__(self):
        super().__init__(('127.0.0.1', 0), _Handler)
        self.files, self.links, self.requests = {}, {}, []
        self.drop_after = {}        # name -> bytes sent before the connection is dropped
        self.drop_always = False    # drop every time, not only the first
        self.ranges = True          # honour Range requests
        self.length = True          # send Content-Length
        self.stall = 0.             # seconds before answering
        self.pace = 0.              # seconds between 64 kB chunks of a body
        self.thread = threading.Thread(target=self.serve_forever, kwargs=dict(poll_interval=0.05),
                                       daemon=True)

    @property
    def url(self) -> str:
        return f'http://127.0.0.1:{self.server_address[1]}'

    def bodies(self, name: str) -> list:
        """Ranges asked for file ``name`` (None: the whole file)."""
        return [r for p, r in self.requests if p.endswith(f'/{name}')]


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'

    def log_message(self, *args):
        pass

    def do_GET(self):  # noqa: N802
        host = self.server
        host.requests.append((self.path, self.headers.get('Range')))
        url = urllib.parse.urlsplit(self.path)
        link = re.fullmatch(r'/f/(\w+)/', url.path)
        if host.stall:
            time.sleep(host.stall)
        if link and link[1] in host.links:
            if 'dl=1' in url.query:
                return self._answer(302, b'', Location=f'/files/{host.links[link[1]]}')
            page = b'<!DOCTYPE html><html><head><title>Sign in - Seafile</title></head></html>'
            return self._answer(200, page, **{'Content-Type': 'text/html; charset=utf-8'})
        name = re.fullmatch(r'/(?:files|mirror)/([\w.-]+)', url.path)
        if not name or name[1] not in host.files:
            return self._answer(404, b'not found')
        self._send_file(name[1], host.files[name[1]])

    def _answer(self, status, body, **headers):
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _send_file(self, name, data):
        host = self.server
        start = 0
        asked = re.fullmatch(r'bytes=(\d+)-', self.headers.get('Range') or '')
        if asked and host.ranges:
            start = int(asked[1])
            if start >= len(data):
                return self._answer(416, b'', **{'Content-Range': f'bytes */{len(data)}'})
            self.send_response(206)
            self.send_header('Content-Range', f'bytes {start}-{len(data) - 1}/{len(data)}')
        else:
            self.send_response(200)
        body = data[start:]
        self.send_header('Content-Type', 'application/octet-stream')
        if host.length:
            self.send_header('Content-Length', str(len(body)))
        else:
            self.close_connection = True        # the end of the body is the end of the stream
        self.end_headers()
        cut = host.drop_after.get(name) if host.drop_always else host.drop_after.pop(name, None)
        if cut is not None:
            self.wfile.write(body[:cut])
            self.wfile.flush()
            self.close_connection = True
            return
        for i in range(0, len(body), 1 << 16):
            self.wfile.write(body[i:i + (1 << 16)])
            if host.pace:
                self.wfile.flush()
                time.sleep(host.pace)


@pytest.fixture
def host():
    server = Host()
    server.thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    """An empty cache and working directory per test; no proxy; downloads allowed (only
    this test's server is named anywhere)."""
    monkeypatch.setenv('INLINE_MM_WEIGHTS', str(tmp_path / 'cache'))
    for var in ('INLINE_MM_OFFLINE', 'HF_HUB_OFFLINE', 'INLINE_MM_WEIGHTS_MIRROR',
                'http_proxy', 'https_proxy', 'HTTP_PROXY', 'HTTPS_PROXY', 'all_proxy',
                'ALL_PROXY', 'no_proxy', 'NO_PROXY'):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv('INLINE_MM_DOWNLOAD_TIMEOUT', '10')
    monkeypatch.setenv('INLINE_MM_DOWNLOAD_RETRIES', '2')
    work = tmp_path / 'work'
    work.mkdir()
    monkeypatch.chdir(work)
    return tmp_path / 'cache'


def official_bytes(cls=InLineSwin, **kw) -> bytes:
    """A checkpoint of ``cls(**kw)`` in the official ``{'model': ...}`` layout."""
    model = cls(**kw, drop_path_rate=0.)
    model.init_weights()
    buf = io.BytesIO()
    torch.save({'model': model.state_dict(), 'epoch': 300}, buf)
    return buf.getvalue()


def smoke(family: str) -> dict:
    return {k: v for k, v in FAMILIES[family].smoke.items() if k != 'drop_path_rate'}


@pytest.fixture(scope='module')
def swin_t_bytes():
    return official_bytes(**NARROW_SWIN_T)


def mirrored(host, monkeypatch, **files):
    """Serve ``files`` as the mirror of the official files (``INLINE_MM_WEIGHTS_MIRROR``)."""
    host.files.update(files)
    monkeypatch.setenv('INLINE_MM_WEIGHTS_MIRROR', f'{host.url}/mirror/')


def _refused(url: str, pattern: str):
    """Resolving ``url`` stops with a WeightsError that matches ``pattern``."""
    with pytest.raises(WeightsError, match=pattern):
        weights.resolve(url)


def leftovers(cache: Path) -> list:
    """Files in the cache other than locks (a refused download must leave none)."""
    return sorted(str(p.relative_to(cache)) for p in cache.rglob('*')
                  if p.is_file() and '.locks' not in p.parts)


# ------------------------------------------------------------------ the table
def test_table_lists_the_thirteen_official_files():
    table = weights.releases()
    assert len(table) == 13
    readme = (ROOT / 'checkpoints/README.md').read_text()
    for name, (family, release) in table.items():
        assert weights.target(SCHEME + name).file == f'inline_{name}.pth' and name.startswith(
            family.name[len('InLine'):].lower() + '_')
        assert release.arch in family.presets
        assert re.fullmatch(r'https://cloud\.tsinghua\.edu\.cn/f/[0-9a-f]{20}/\?dl=1', release.url)
        assert release.sha256 is None           # not published: none invented
        # the documentation follows the table
        assert f'`{SCHEME}{name}`' in readme and release.url in readme
    assert len({r.url for _, r in table.values()}) == 13
    # an official link is its file, whichever way it is written in a config
    t = weights.target(table['pvt_l'][1].url)
    assert t.label == 'inline://pvt_l' and t.file == 'inline_pvt_l.pth'


def test_unknown_short_name_suggests_the_closest():
    with pytest.raises(WeightsError, match=r"'inline://swin_tiny' is not an official InLine "
                                           r'file; did you mean inline://swin_t\?'):
        weights.target('inline://swin_tiny')


def test_local_paths_pass_through_and_a_missing_official_one_names_its_short_name(tmp_path):
    local = tmp_path / 'mine.pth'
    local.write_bytes(b'x')
    assert weights.resolve(local) == str(local)
    with pytest.raises(FileNotFoundError, match=r"'checkpoints/inline_pvt_s\.pth'.*"
                                                r"checkpoint='inline://pvt_s'"):
        weights.resolve('checkpoints/inline_pvt_s.pth')


# ------------------------------------------------------------------ downloading
def test_official_link_redirect_is_followed_verified_cached_and_loaded(host, cache):
    golden = (GOLDEN / 'inline_swin_tiny_224.pth').read_bytes()
    host.files['inline_swin_tiny_224.pth'] = golden
    host.links[LINK] = 'inline_swin_tiny_224.pth'
    url = f'{host.url}/f/{LINK}/?dl=1'
    model = InLineSwin(**GOLDEN_SWIN, init_cfg=dict(type='Pretrained', checkpoint=url))
    model.init_weights()
    [(path, _)] = [(p, r) for p, r in host.requests if p.startswith('/files/')]
    assert [p for p, _ in host.requests] == [f'/f/{LINK}/?dl=1', path]
    local = Path(weights.resolve(url))
    assert local.parent == cache and local.read_bytes() == golden
    digest = hashlib.sha256(golden).hexdigest()
    assert (cache / f'{local.name}.sha256').read_text() == f'{digest}  {local.name}\n'
    assert leftovers(cache) == sorted([local.name, f'{local.name}.sha256'])
    reference = InLineSwin(**GOLDEN_SWIN)
    load_pretrained(reference, str(GOLDEN / 'inline_swin_tiny_224.pth'))
    for k, v in reference.state_dict().items():
        assert torch.equal(model.state_dict()[k], v), k
    # a second load, another model: from the cache, no request
    again = InLineSwin(**GOLDEN_SWIN, init_cfg=dict(type='Pretrained', checkpoint=url))
    again.init_weights()
    assert len(host.requests) == 2


def test_short_name_through_the_mirror_then_offline(host, cache, monkeypatch, swin_t_bytes):
    mirrored(host, monkeypatch, **{'inline_swin_t.pth': swin_t_bytes})
    path = weights.resolve('inline://swin_t')
    assert path == str(cache / 'inline_swin_t.pth')
    assert host.bodies('inline_swin_t.pth') == [None]
    monkeypatch.setenv('INLINE_MM_OFFLINE', '1')
    assert weights.resolve('inline://swin_t') == path        # offline: the cache serves it
    Path(path).unlink()
    with pytest.raises(WeightsError) as e:
        weights.resolve('inline://swin_t')
    message = str(e.value)
    assert 'downloads are off (INLINE_MM_OFFLINE=1)' in message
    official = weights.releases()['swin_t'][1].url
    assert f'download {official} (tried {host.url}/mirror/inline_swin_t.pth)' in message
    assert f'put the file at {cache / "inline_swin_t.pth"} (or ' \
           f'{Path.cwd() / "checkpoints" / "inline_swin_t.pth"})' in message
    monkeypatch.delenv('INLINE_MM_OFFLINE')
    monkeypatch.setenv('HF_HUB_OFFLINE', '1')                # the ecosystem's variable too
    _refused('inline://swin_t', r'downloads are off \(HF_HUB_OFFLINE=1\)')
    assert host.bodies('inline_swin_t.pth') == [None]


def test_file_in_checkpoints_is_used_without_the_network(host, cache, monkeypatch, swin_t_bytes):
    mirrored(host, monkeypatch)                              # the mirror has nothing
    Path('checkpoints').mkdir()
    Path('checkpoints/inline_swin_t.pth').write_bytes(swin_t_bytes)
    assert weights.resolve('inline://swin_t') == 'checkpoints/inline_swin_t.pth'
    model = InLineSwin(**NARROW_SWIN_T, init_cfg=dict(type='Pretrained',
                                                      checkpoint='inline://swin_t'))
    model.init_weights()
    assert host.requests == [] and not cache.exists()


def test_interrupted_body_is_resumed_with_a_range_request(host, cache, monkeypatch,
                                                          swin_t_bytes):
    mirrored(host, monkeypatch, **{'inline_swin_t.pth': swin_t_bytes})
    half = len(swin_t_bytes) // 2
    host.drop_after['inline_swin_t.pth'] = half
    path = weights.resolve('inline://swin_t')
    assert host.bodies('inline_swin_t.pth') == [None, f'bytes={half}-']
    assert Path(path).read_bytes() == swin_t_bytes


def test_server_ignoring_range_restarts_cleanly(host, cache, monkeypatch, swin_t_bytes):
    mirrored(host, monkeypatch, **{'inline_swin_t.pth': swin_t_bytes})
    host.ranges = False
    host.drop_after['inline_swin_t.pth'] = len(swin_t_bytes) // 3
    path = weights.resolve('inline://swin_t')
    assert len(host.bodies('inline_swin_t.pth')) == 2        # asked to resume, got it all
    assert Path(path).read_bytes() == swin_t_bytes


def test_404_is_refused_at_once_naming_the_url_and_the_manual_route(host, cache, monkeypatch):
    mirrored(host, monkeypatch)
    with pytest.raises(WeightsError) as e:
        weights.resolve('inline://cswin_b')
    message = str(e.value)
    assert message.startswith(f'{host.url}/mirror/inline_cswin_b.pth: HTTP 404')
    assert f'put the file at {cache / "inline_cswin_b.pth"}' in message
    assert len(host.requests) == 1                           # no retry can change a 404
    assert leftovers(cache) == []


def test_html_page_with_status_200_is_refused(host, cache):
    host.links[LINK] = 'inline_swin_t.pth'
    page = f'{host.url}/f/{LINK}/'                           # the link without ?dl=1
    with pytest.raises(WeightsError) as e:
        weights.resolve(page)
    assert str(e.value).startswith(
        f"{page} did not send an InLine checkpoint: what arrived (Content-Type text/html; "
        "charset=utf-8) is not a PyTorch checkpoint: it is an HTML page titled "
        "'Sign in - Seafile'")
    assert leftovers(cache) == []


def test_body_cut_short_is_refused(host, cache, monkeypatch, swin_t_bytes):
    mirrored(host, monkeypatch, **{'inline_swin_t.pth': swin_t_bytes})
    cut = len(swin_t_bytes) // 2
    # with Content-Length, every attempt ends early: the retries give up, naming the count
    host.drop_after['inline_swin_t.pth'], host.drop_always = 4096, True
    _refused('inline://swin_t', r'/mirror/inline_swin_t\.pth: download failed after '
                                r'3 attempt\(s\): the connection closed after')
    assert not (cache / 'inline_swin_t.pth').exists()       # only the resumable part is kept
    assert leftovers(cache) == ['.partial/inline_swin_t.pth']
    # without Content-Length the end looks like success: the file itself says it is cut
    (cache / '.partial/inline_swin_t.pth').unlink()
    host.length, host.drop_after['inline_swin_t.pth'] = False, cut
    _refused('inline://swin_t', r'did not send a checkpoint of inline://swin_t: '
                                r'what arrived \(Content-Type application/octet-'
                                r'stream\) is a PyTorch checkpoint cut short')
    assert leftovers(cache) == []


def test_wrong_file_is_refused(host, cache, monkeypatch):
    pvt = official_bytes(InLinePVT, **smoke('InLinePVT'))
    golden = (GOLDEN / 'inline_swin_tiny_224.pth').read_bytes()      # depths (2, 2, 2, 2)
    mirrored(host, monkeypatch, **{'inline_swin_t.pth': pvt, 'inline_swin_s.pth': golden})
    _refused('inline://swin_t', r'did not send a checkpoint of inline://swin_t: what '
                                r'arrived \([\d,]+ bytes\) is a checkpoint of '
                                r'InLinePVT, not of InLineSwin')
    _refused('inline://swin_s', r'inline://swin_s: what arrived \([\d,]+ bytes\) is '
                                r'not InLineSwin small: checkpoint of InLineSwin with '
                                r'depths \(2, 2, 2, 2\).*another variant')
    assert leftovers(cache) == []


def test_slow_server_times_out_and_retries_a_bounded_number_of_times(host, cache, monkeypatch):
    host.files['slow.pth'] = b'never sent'
    host.stall = 1.5
    monkeypatch.setenv('INLINE_MM_DOWNLOAD_TIMEOUT', '0.3')
    monkeypatch.setenv('INLINE_MM_DOWNLOAD_RETRIES', '1')
    start = time.monotonic()
    _refused(f'{host.url}/files/slow.pth', r'slow\.pth: download failed after 2 attempt\(s\): '
                                           r'timed out')
    assert time.monotonic() - start < 3                     # 2 x 0.3 s + a 1 s pause
    assert len(host.requests) == 2 and leftovers(cache) == []


def test_an_unreachable_host_fails_at_once(cache, monkeypatch):
    """An offline machine: the name does not resolve (or no route); no retry, no pause."""
    import socket
    pauses = []
    monkeypatch.setattr(weights.time, 'sleep', pauses.append)

    def no_dns(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, 'Name or service not known')
    monkeypatch.setattr(socket, 'getaddrinfo', no_dns)
    _refused('http://weights.invalid/files/inline_swin_t.pth',
             r'inline_swin_t\.pth: \[Errno -2\] Name or service not known: this machine '
             r'cannot reach the host \(offline, or no DNS\); not retried\. To use it without '
             r'the network, download')
    assert pauses == [] and leftovers(cache) == []


def test_proxy_variables_are_honoured(host, cache, monkeypatch, swin_t_bytes):
    host.files['inline_swin_t.pth'] = swin_t_bytes
    monkeypatch.setenv('http_proxy', host.url)              # the server doubles as the proxy
    url = 'http://weights.invalid/files/inline_swin_t.pth'  # never resolved: the proxy is asked
    assert Path(weights.resolve(url)).read_bytes() == swin_t_bytes
    assert host.requests == [(url, None)]                   # absolute form: a proxy request
    monkeypatch.setenv('no_proxy', '127.0.0.1')
    weights.resolve(f'{host.url}/files/inline_swin_t.pth')
    assert host.requests[1] == ('/files/inline_swin_t.pth', None)


# ------------------------------------------------------------------ hashes
def test_recorded_hash_is_checked_on_later_loads(host, cache, monkeypatch, swin_t_bytes):
    mirrored(host, monkeypatch, **{'inline_swin_t.pth': swin_t_bytes})
    path = Path(weights.resolve('inline://swin_t'))
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF                             # one flipped byte
    path.write_bytes(bytes(data))
    _refused('inline://swin_t', r'inline_swin_t\.pth has changed since it was '
                                r'downloaded from .*fetch --force inline://swin_t')
    assert weights_cli.main(['fetch', '--force', 'swin_t']) == 0
    assert path.read_bytes() == swin_t_bytes and len(host.bodies('inline_swin_t.pth')) == 2


def test_known_hash_is_checked_instead(host, cache, monkeypatch, swin_t_bytes):
    mirrored(host, monkeypatch, **{'inline_swin_t.pth': swin_t_bytes})
    t = weights.target('inline://swin_t')
    wrong = replace(t, release=replace(t.release, sha256='0' * 64))
    with pytest.raises(WeightsError, match=r'what arrived has sha256 [0-9a-f]{64}, expected 0{64}'):
        weights.fetch(wrong)
    assert leftovers(cache) == []
    right = replace(t, release=replace(t.release,
                                       sha256=hashlib.sha256(swin_t_bytes).hexdigest()))
    assert weights.fetch(right).read_bytes() == swin_t_bytes


def test_file_put_in_the_cache_by_hand_is_verified_and_recorded(cache, monkeypatch):
    monkeypatch.setenv('INLINE_MM_OFFLINE', '1')
    cache.mkdir()
    pvt = official_bytes(InLinePVT, **smoke('InLinePVT'))
    (cache / 'inline_swin_t.pth').write_bytes(pvt)          # the wrong file, by hand
    _refused('inline://swin_t', r'inline_swin_t\.pth \(in the cache with no recorded '
                                r'hash\) is not a checkpoint of inline://swin_t: the '
                                r'file .* is a checkpoint of InLinePVT')
    (cache / 'inline_swin_t.pth').write_bytes(official_bytes(**NARROW_SWIN_T))
    weights.resolve('inline://swin_t')
    digest = hashlib.sha256((cache / 'inline_swin_t.pth').read_bytes()).hexdigest()
    assert (cache / 'inline_swin_t.pth.sha256').read_text().split()[0] == digest


# ------------------------------------------------------------------ concurrency
#: resolve argv[1] once both children are ready (imports take seconds; the body takes 2 s)
CHILD = """
import os, sys, time
from pathlib import Path
from inline_mm.models import weights
ready = Path(sys.argv[2])
(ready / str(os.getpid())).touch()
deadline = time.monotonic() + 60
while len(list(ready.iterdir())) < 2 and time.monotonic() < deadline:
    time.sleep(0.01)
print('path', weights.resolve(sys.argv[1]), flush=True)
"""


@pytest.mark.subprocess
def test_two_processes_download_once_and_never_see_a_partial_file(host, cache, swin_t_bytes):
    host.files['inline_swin_t.pth'] = swin_t_bytes
    host.pace = 2. / (len(swin_t_bytes) / (1 << 16))       # the body takes ~2 s
    url = f'{host.url}/files/inline_swin_t.pth'
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS='1')
    ready = cache.parent / 'ready'
    ready.mkdir()
    procs = [subprocess.Popen([sys.executable, '-c', CHILD, url, str(ready)], env=env,
                              cwd=cache.parent,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(2)]
    final = cache / weights.target(url).file
    seen = set()
    deadline = time.monotonic() + 120
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        if final.exists():
            seen.add(final.stat().st_size)                   # only ever the whole file
        time.sleep(0.01)
    outs = [p.communicate(timeout=60)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert seen <= {len(swin_t_bytes)}
    assert host.bodies('inline_swin_t.pth') == [None]       # one download
    paths = {re.search(r'^path (.*)$', o, re.M)[1] for o in outs}
    assert paths == {str(final)} and final.read_bytes() == swin_t_bytes
    waited = [o for o in outs if 'another process is downloading it; waiting' in o]
    assert len(waited) == 1, outs                            # they did overlap
    assert 'Downloading' in ''.join(outs) and 'verified and saved as' in ''.join(outs)


# ------------------------------------------------------------------ the other loaders
def test_cli_list_fetch_path_verify(host, cache, monkeypatch, capsys, swin_t_bytes):
    mirrored(host, monkeypatch, **{'inline_swin_t.pth': swin_t_bytes})
    assert weights_cli.main(['path', 'swin_t']) == 1             # not there yet; says where
    out = capsys.readouterr()
    assert out.out.strip() == str(cache / 'inline_swin_t.pth') and 'fetch swin_t' in out.err
    assert weights_cli.main(['fetch', 'swin_t', 'inline://swin_x']) == 1
    out = capsys.readouterr()
    assert out.out.strip() == str(cache / 'inline_swin_t.pth')
    assert 'did you mean inline://swin_t' in out.err
    assert weights_cli.main(['list']) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()
            if line.startswith(SCHEME)}
    assert len(rows) == 13
    assert rows['inline://swin_t'][1:6] == ['InLineSwin', 'tiny', 'cache',
                                            f'{len(swin_t_bytes) / 1e6:.1f}', 'MB']
    assert rows['inline://pvt_l'][1:5] == ['InLinePVT', 'large', 'no', '-']
    assert rows['inline://pvt_l'][5] == f'{host.url}/mirror/inline_pvt_l.pth'
    assert weights_cli.main(['path', 'inline://swin_t']) == 0
    assert capsys.readouterr().out.strip() == str(cache / 'inline_swin_t.pth')
    assert weights_cli.main(['verify']) == 0
    assert re.search(r'^ok .*inline_swin_t\.pth .*hash matches', capsys.readouterr().out, re.M)
    (cache / 'inline_swin_t.pth').write_bytes(swin_t_bytes[:-10])
    assert weights_cli.main(['verify']) == 1
    assert 'FAIL' in capsys.readouterr().out


@pytest.mark.subprocess
def test_cli_runs_as_a_module(cache):
    out = subprocess.run([sys.executable, '-m', 'inline_mm.cli.weights', 'list'], cwd=ROOT,
                         capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert out.returncode == 0, out.stderr
    assert 'inline://deit_b' in out.stdout
    assert 'RuntimeWarning' not in out.stderr


def test_convert_tool_and_timm_take_names(host, cache, monkeypatch, swin_t_bytes, tmp_path):
    from safetensors.torch import load_file

    from inline_mm.timm import create_backbone
    mirrored(host, monkeypatch, **{'inline_swin_t.pth': swin_t_bytes})
    served = torch.load(io.BytesIO(swin_t_bytes), weights_only=True)['model']
    dst = tmp_path / 'swin_t.safetensors'
    runpy.run_path(str(ROOT / 'tools/model_converters/convert_checkpoint.py'))['main'](
        ['inline://swin_t', str(dst)])
    converted = load_file(dst)
    assert converted and all(torch.equal(v, served[k]) for k, v in converted.items())
    model = create_backbone('inline_swin_tiny', pretrained=True, file='inline://swin_t',
                            embed_dims=16, num_heads=(1, 2, 4, 8))
    for k, v in model.backbone.state_dict().items():
        assert torch.equal(v, served[k]), k
    assert host.bodies('inline_swin_t.pth') == [None]       # one download served both


def test_progress_on_a_terminal_shows_size_speed_and_time_left(host, tmp_path, monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    host.files['w.pth'] = bytes(300_000)
    host.pace = 0.1                                          # 5 chunks, 0.5 s
    monkeypatch.setattr(sys, 'stderr', Terminal())
    info = weights.download(f'{host.url}/files/w.pth', tmp_path / 'w.pth', label='w.pth')
    shown = sys.stderr.getvalue()
    assert info['size'] == 300_000 and shown.endswith('\n') and shown.count('\r') >= 2
    assert re.search(r'\rw\.pth: 300\.0 kB / 300\.0 kB 100% [\d.]+ kB/s ETA 00:00:00\x1b\[K\n$',
                     shown), shown
    assert re.search(r'\rw\.pth: \d+\.\d kB / 300\.0 kB +\d+% [\d.]+ kB/s ETA \d\d:\d\d:\d\d',
                     shown), shown


# ------------------------------------------------------------------ end to end
@pytest.mark.subprocess
def test_train_with_a_url_in_init_cfg(host, cache, tmp_path):
    """tools/train.py on a shipped UperNet config, shrunk, whose init_cfg is an official-
    style link on the server: the run downloads, verifies and loads it, then trains."""
    from reliability_support import env, run, tiny_config, toy_ade, train_cmd
    # the backbone of tiny_config's UperNet (support.shrink_backbone of the shipped one's)
    tiny = {k: v for k, v in shrink_backbone(dict(type='InLineSwin')).items()
            if k not in ('type', 'init_cfg')}
    host.files['inline_swin_t.pth'] = official_bytes(**tiny)
    host.links[LINK] = 'inline_swin_t.pth'
    url = f'{host.url}/f/{LINK}/?dl=1'
    config = tiny_config(tmp_path, 'upernet', extra=(
        f"model = dict(backbone=dict(init_cfg=dict(_delete_=True, type='Pretrained', "
        f"checkpoint={url!r})))\n"
        'max_iters = 1\ntrain_cfg = dict(max_iters=1)\n'))
    data = toy_ade(tmp_path / 'toy_ade', num_train=4)
    assert env()['INLINE_MM_WEIGHTS'] == str(cache)         # the child gets this test's cache
    run(train_cmd(config, tmp_path / 'wd', [f'train_dataloader.dataset.data_root={data}']),
        tmp_path / 'train.log')
    log = (tmp_path / 'train.log').read_text()
    assert re.search(rf'InLineSwin: loaded \d+ tensors from {re.escape(url)} '
                     rf'\({re.escape(str(cache))}/', log), log[-3000:]
    assert 'Iter(train) [1/1]' in log
    assert [p for p, _ in host.requests] == [f'/f/{LINK}/?dl=1', '/files/inline_swin_t.pth']
    name = weights.target(url).file
    assert leftovers(cache) == [name, f'{name}.sha256']


@pytest.mark.parametrize('config', [
    'inline_swin/inline-swin-t-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py',
    'inline_pvt/mask-rcnn_inline-pvt-s_fpn_1x_coco.py'])
def test_shipped_config_takes_a_local_path_through_cfg_options(config, tmp_path, monkeypatch):
    """``--cfg-options model.backbone.init_cfg.checkpoint=PATH`` replaces a shipped config's
    short name: that file is loaded and nothing is looked up (offline, no server)."""
    from mmengine.config import Config
    monkeypatch.setenv('INLINE_MM_OFFLINE', '1')
    cfg = Config.fromfile(str(ROOT / 'configs' / config))
    assert cfg.model.backbone.init_cfg.checkpoint.startswith(SCHEME)
    local = tmp_path / 'my weights.pth'
    cfg.merge_from_dict({'model.backbone.init_cfg.checkpoint': str(local)})  # --cfg-options
    backbone = cfg.model.backbone.to_dict()
    init_cfg = backbone['init_cfg']
    shrink_backbone(backbone)                   # CPU-test widths (drops init_cfg)
    family = FAMILIES[backbone.pop('type')]
    source = family.cls(**backbone)
    source.init_weights()
    torch.save({'model': source.state_dict()}, local)
    model = family.cls(**dict(backbone, init_cfg=init_cfg))
    model.init_weights()
    for k, v in source.state_dict().items():
        assert torch.equal(model.state_dict()[k], v), k
