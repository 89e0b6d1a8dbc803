"""The official InLine weights by name or URL: downloaded once, verified, cached.

One resolver serves every loader of the project (``init_cfg=dict(type='Pretrained',
checkpoint=...)``, ``tools/model_converters/convert_checkpoint.py``, :mod:`inline_mm.timm`, the
command line ``python -m inline_mm.cli.weights``).  A checkpoint reference is one of:

``'inline://swin_t'``
    one of the 13 official ImageNet-1K files, by short name (``python -m inline_mm.cli.weights
    list``; each is a ``Variant``'s ``weights``, declared at the end of its family's file);
``'https://...'``
    any URL; an official link is recognised as its file;
anything else
    a local path, used as it is.

A released file is looked for, in this order, and the network is touched only by the last:

1. ``checkpoints/<file>`` relative to the working directory (the manual route),
2. the cache, ``$INLINE_MM_WEIGHTS`` (default ``<torch hub dir>/inline_mm``, i.e.
   ``~/.cache/torch/hub/inline_mm``),
3. downloaded into the cache, unless ``INLINE_MM_OFFLINE=1`` (or ``HF_HUB_OFFLINE=1``).

A download goes to ``<cache>/.partial/<file>`` under a lock (``<cache>/.locks/``), so that
concurrent processes (DDP ranks, several jobs) fetch a file once and the others wait.  It
follows redirects (the official links answer ``?dl=1`` with one), resumes an interrupted
body with an HTTP ``Range`` request (or starts again when the server ignores it), gives up
on an attempt after ``INLINE_MM_DOWNLOAD_TIMEOUT`` seconds without data (60) and retries
``INLINE_MM_DOWNLOAD_RETRIES`` times (4) with growing pauses; a host that cannot be reached
at all (its name does not resolve, no route: an offline machine) fails at once.  ``http_proxy``,
``https_proxy`` and ``no_proxy`` are honoured; ``INLINE_MM_WEIGHTS_MIRROR=<base URL>``
fetches every official file from ``<base URL>/<file>`` instead.

What arrives is verified before it is kept: it must be read by the safe reader
(:func:`inline_mm.models.read_checkpoint`) and be a checkpoint of the expected family and
variant; a web page, a cut-short body or another model is refused with an error naming the
URL and what arrived, and nothing is left in the cache.  The file's sha256 is then recorded
next to it (``<file>.sha256``, ``sha256sum`` format) and checked at every later load.  Where
the project knows a file's hash (``Variant.sha256``) that is checked instead; for the
official files it knows none.

Cache layout::

    <cache>/inline_swin_t.pth            complete, verified files only
    <cache>/inline_swin_t.pth.sha256     the hash recorded on arrival
    <cache>/.partial/inline_swin_t.pth   a download in progress (resumed from here)
    <cache>/.locks/inline_swin_t.pth.lock
"""
import difflib
import hashlib
import http.client
import importlib.metadata
import logging
import os
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional, Tuple

from .checkpoint import (CheckpointError, check_layout, describe_non_checkpoint,
                         extract_state_dict, print_log, read_checkpoint)
from .families import FAMILIES, Family, Variant, detect_family

__all__ = ['SCHEME', 'MANUAL_DIR', 'WeightsError', 'Target', 'releases', 'target', 'resolve',
           'fetch', 'cache_dir', 'offline', 'local_copy', 'verify_file', 'verify_local',
           'download', 'format_size']

#: prefix of the short names: ``'inline://swin_t'``
SCHEME = 'inline://'
#: environment variables that switch downloads off (the first is the project's own)
OFFLINE_VARIABLES = ('INLINE_MM_OFFLINE', 'HF_HUB_OFFLINE')
#: where an official file is looked for before the cache (relative to the working directory)
MANUAL_DIR = 'checkpoints'
#: HTTP answers worth another attempt (the others will not change)
_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_CHUNK = 1 << 20


class WeightsError(CheckpointError):
    """A checkpoint that could not be found, downloaded or verified."""


@dataclass(frozen=True)
class Target:
    """A remote checkpoint: where it is downloaded from and the file it becomes.

    Args:
        url (str): What is downloaded (the mirror's link when a mirror is set).
        file (str): Its name in ``checkpoints/`` and in the cache.
        family (Family, optional): The family it must be a checkpoint of (released files).
        release (Variant, optional): The variant whose official file it is.
    """

    url: str
    file: str
    family: Optional[Family] = None
    release: Optional[Variant] = None

    @property
    def label(self) -> str:
        """How the user named it: the short name of a released file, else the URL."""
        return SCHEME + self.release.weights if self.release else self.url

    @property
    def known_sha256(self) -> Optional[str]:
        return self.release.sha256 if self.release else None


def releases() -> Dict[str, Tuple[Family, Variant]]:
    """Short name -> (family, variant) of every official file, in table order."""
    return {v.weights: (f, v) for f in FAMILIES.values() for v in f.checkpoints}


def target(reference: str) -> Optional[Target]:
    """The remote checkpoint that ``reference`` names, or None for a local path.

    Raises:
        WeightsError: an ``inline://`` name that is not in the table.
    """
    reference = os.fspath(reference)
    known = releases()
    if reference.startswith(SCHEME):
        name = reference[len(SCHEME):]
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f'; did you mean {SCHEME}{close[0]}?' if close else ''
            raise WeightsError(f'{reference!r} is not an official InLine file{hint} Known: '
                               + ', '.join(SCHEME + n for n in known))
        return _release_target(*known[name])
    if reference.startswith(('http://', 'https://')):
        for family, release in known.values():
            if release.url == reference:
                return _release_target(family, release)
        return Target(reference, _url_file_name(reference))
    return None


def _release_target(family: Family, release: Variant) -> Target:
    mirror = os.environ.get('INLINE_MM_WEIGHTS_MIRROR')
    file = _file(release.weights)
    return Target(f"{mirror.rstrip('/')}/{file}" if mirror else release.url, file, family,
                  release)


def _file(name: str) -> str:
    """An official file's name in ``checkpoints/`` and in the cache: ``inline_swin_t.pth``."""
    return f'inline_{name}.pth'


def _url_file_name(url: str) -> str:
    """Cache name of a file known only by its URL: its last path segment, made unique by
    the URL's hash (two hosts may serve different files of one name)."""
    base = urllib.parse.urlsplit(url).path.rstrip('/').rsplit('/', 1)[-1]
    stem, ext = os.path.splitext(base)
    if ext not in ('.pth', '.pt', '.bin', '.ckpt', '.safetensors'):
        stem, ext = base, '.pth'
    stem = re.sub(r'[^\w.-]', '_', stem)[:80] or 'checkpoint'
    return f'{stem}-{hashlib.sha256(url.encode()).hexdigest()[:8]}{ext}'


def cache_dir() -> Path:
    """The cache folder: ``$INLINE_MM_WEIGHTS``, else ``<torch hub dir>/inline_mm``."""
    if os.environ.get('INLINE_MM_WEIGHTS'):
        return Path(os.environ['INLINE_MM_WEIGHTS']).expanduser()
    import torch.hub
    return Path(torch.hub.get_dir()) / 'inline_mm'


def offline() -> Optional[str]:
    """The variable that switches downloads off (``INLINE_MM_OFFLINE=1``, ...), or None."""
    return next((v for v in OFFLINE_VARIABLES
                 if os.environ.get(v, '').strip().lower() in ('1', 'true', 'yes', 'on')), None)


def _manual_path(t: Target) -> Optional[Path]:
    return Path(MANUAL_DIR) / t.file if t.release else None


def local_copy(t: Target) -> Tuple[str, Optional[Path]]:
    """Where ``t`` is on this machine: ``('checkpoints/', path)``, ``('cache', path)`` or
    ``('no', None)``."""
    manual = _manual_path(t)
    if manual is not None and manual.is_file():
        return f'{MANUAL_DIR}/', manual
    cached = cache_dir() / t.file
    return ('cache', cached) if cached.is_file() else ('no', None)


# ------------------------------------------------------------------ resolving
def resolve(reference) -> str:
    """A local file for checkpoint ``reference`` (a path, a URL or an ``inline://`` name),
    downloaded and verified on first use; local paths are returned as they are."""
    reference = os.fspath(reference)
    t = target(reference)
    if t is None:
        _refuse_missing_official_path(reference)
        return reference
    return str(fetch(t))


def _refuse_missing_official_path(path: str):
    """A configured path to an official file that is not there: say how to name it."""
    if os.path.exists(path):
        return
    named = {_file(n): n for n in releases()}
    name = named.get(os.path.basename(path))
    if name is not None:
        raise FileNotFoundError(
            f'checkpoint not found: {path!r}. It is the official {os.path.basename(path)}: put '
            f"the file there, or write checkpoint='{SCHEME}{name}' to have it looked for in "
            f'{MANUAL_DIR}/ and the cache ({cache_dir()}) and downloaded if missing.')


def fetch(t: Target, force: bool = False) -> Path:
    """The local file of ``t``: ``checkpoints/<file>``, the cache, or a verified download.

    Args:
        t (Target): What to fetch (:func:`target`).
        force (bool): Download again even if the cache has it (not ``checkpoints/``).

    Raises:
        WeightsError: offline and missing; the download failed or was refused; a local
            copy does not match its hash.
    """
    if not force:
        found = _find_local(t)
        if found is not None:
            return found
    cached = cache_dir() / t.file
    why_offline = offline()
    if why_offline:
        raise WeightsError(
            f'{t.label} is not on this machine and downloads are off ({why_offline}='
            f'{os.environ[why_offline]}).' + _manual_route(t))
    with _lock(t.file):
        if force:
            _remove(cached, _record_path(cached))
        elif cached.is_file():          # another process downloaded it while we waited
            return _checked(cached, t)
        _download_verified(t, cached)
    return cached


def _find_local(t: Target) -> Optional[Path]:
    manual = _manual_path(t)
    if manual is not None and manual.is_file():
        if t.known_sha256:
            _compare(manual, sha256_of(manual), t.known_sha256, t, recorded=False)
        return manual
    cached = cache_dir() / t.file
    return _checked(cached, t) if cached.is_file() else None


def _checked(path: Path, t: Target) -> Path:
    """``path`` after its hash check; a file put in the cache by hand (no record) is
    verified as a download would be and its hash recorded."""
    expected = t.known_sha256 or _read_record(path)
    if expected is None:
        digest = verify_file(path, t, intro=f'{path} (in the cache with no recorded hash) is '
                                            f'not a checkpoint of {t.label}')
        _write_record(path, digest)
        print_log(f'{t.label}: {path} was put in the cache by hand; verified, sha256 '
                  f'{digest} recorded', logger='current')
        return path
    _compare(path, sha256_of(path), expected, t, recorded=not t.known_sha256)
    return path


def _compare(path: Path, actual: str, expected: str, t: Target, recorded: bool):
    if actual == expected:
        return
    if recorded:
        raise WeightsError(
            f'{path} has changed since it was downloaded from {t.url} (sha256 {actual}, '
            f'recorded {expected}): delete it, or run python -m inline_mm.cli.weights fetch '
            f'--force {t.label}, to download it again.')
    raise WeightsError(f'{path} is not the file {t.label} names (sha256 {actual}, expected '
                       f'{expected}): replace it with the file from {t.url}.')


def _manual_route(t: Target) -> str:
    source = t.release.url if t.release else t.url
    where = f' {cache_dir() / t.file}'
    if t.release:
        where += f' (or {Path.cwd() / MANUAL_DIR / t.file})'
    mirror = f' (tried {t.url})' if t.release and t.url != t.release.url else ''
    return (f' To use it without the network, download {source}{mirror} on a machine that '
            f'can reach it and put the file at{where}.')


# ------------------------------------------------------------------ verifying
def verify_file(path: Path, t: Target, content_type: str = '',
                intro: Optional[str] = None) -> str:
    """Check that ``path`` is what ``t`` names; returns its sha256.

    The file must be read by the safe reader and be a checkpoint of an InLine family; for
    a released file, of its family and variant (depths), and of its hash where known.

    Args:
        path (Path): The file.
        t (Target): What it should be.
        content_type (str): The server's ``Content-Type`` for it (named in errors).
        intro (str, optional): How an error begins; default ``'<url> did not send a
            checkpoint of <name>'`` (the file was just downloaded).

    Raises:
        WeightsError: naming ``t``'s URL (or ``intro``) and what the file turned out to be.
    """
    size = path.stat().st_size
    sent = intro or (f'{t.url} did not send a checkpoint of {t.label}' if t.release else
                     f'{t.url} did not send an InLine checkpoint')
    it = 'the file' if intro else 'what arrived'
    ctype = f'Content-Type {content_type}' if content_type else ''
    if path.suffix != '.safetensors':
        what = describe_non_checkpoint(path)        # names the size itself
        if what is not None:
            raise WeightsError(f'{sent}: {it}{f" ({ctype})" if ctype else ""} {what}.')
    try:
        state = extract_state_dict(read_checkpoint(path))
        family = detect_family(state)
    except CheckpointError as e:
        raise WeightsError(f'{sent}: {it} ({size:,} bytes{", " + ctype if ctype else ""}) '
                           f'cannot be used: {e}') from None
    if t.family is not None:
        if family != t.family.name:
            raise WeightsError(f'{sent}: {it} ({size:,} bytes) is a checkpoint of '
                               f'{family}, not of {t.family.name}.')
        arch = t.release.arch
        try:
            check_layout(t.family.convert(state), family, family, t.family.presets[arch]['depths'],
                         arch, t.family.presets, t.family.cls.block_key)
        except CheckpointError as e:
            raise WeightsError(f'{sent}: {it} ({size:,} bytes) is not {family} {arch}: '
                               f'{e}') from None
    digest = sha256_of(path)
    if t.known_sha256 and digest != t.known_sha256:
        raise WeightsError(f'{sent}: {it} has sha256 {digest}, expected '
                           f'{t.known_sha256}.')
    return digest


def verify_local(path: Path, t: Target, in_cache: bool) -> Tuple[str, str]:
    """:func:`verify_file` of a local copy, then its hash against the known or recorded one;
    a cached file without a record (put there by hand) gets one. Returns ``(sha256, what
    was compared)``."""
    digest = verify_file(path, t, intro=f'{path} is not a checkpoint of {t.label}')
    expected = t.known_sha256 or (_read_record(path) if in_cache else None)
    if expected is not None:
        _compare(path, digest, expected, t, recorded=not t.known_sha256)
        return digest, 'hash matches'
    if in_cache:
        _write_record(path, digest)
        return digest, 'hash recorded now'
    return digest, 'no hash known to compare'


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, 'rb') as f:
        for block in iter(lambda: f.read(_CHUNK), b''):
            h.update(block)
    return h.hexdigest()


def _record_path(path: Path) -> Path:
    return path.with_name(path.name + '.sha256')


def _read_record(path: Path) -> Optional[str]:
    try:
        return _record_path(path).read_text().split()[0]
    except (FileNotFoundError, IndexError):
        return None


def _write_record(path: Path, digest: str):
    record = _record_path(path)
    tmp = record.with_name(f'.{record.name}.{os.getpid()}')
    tmp.write_text(f'{digest}  {path.name}\n')
    os.replace(tmp, record)


def _remove(*paths: Path):
    for p in paths:
        p.unlink(missing_ok=True)


# ------------------------------------------------------------------ downloading
@contextmanager
def _lock(file: str):
    """Hold ``<cache>/.locks/<file>.lock``; says so when another process holds it."""
    from filelock import FileLock, Timeout
    path = cache_dir() / '.locks' / f'{file}.lock'
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(path))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        print_log(f'{file}: another process is downloading it; waiting for it to finish '
                  f'(lock {path})', logger='current')
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def _download_verified(t: Target, dst: Path):
    """Download ``t`` into ``.partial/``, verify it, record its hash and move it to
    ``dst``; a refused file is deleted, an interrupted one kept to be resumed."""
    partial = dst.parent / '.partial' / dst.name
    partial.parent.mkdir(parents=True, exist_ok=True)
    try:
        arrived = download(t.url, partial, label=t.label)
    except WeightsError as e:
        raise WeightsError(f'{e}{_manual_route(t)}') from None
    try:
        digest = verify_file(partial, t, arrived['content_type'])
    except Exception:               # refused, or not even readable as far as the checks go
        _remove(partial)
        raise
    _write_record(dst, digest)
    os.replace(partial, dst)
    print_log(f'{t.label}: verified and saved as {dst} (sha256 {digest})', logger='current')


class _Interrupted(OSError):
    """The body ended before its announced length."""


def _env_number(name: str, default: float) -> float:
    value = os.environ.get(name)
    try:
        return float(value) if value else default
    except ValueError:
        raise ValueError(f'{name}={value!r} is not a number') from None


def download(url: str, dst: Path, timeout: Optional[float] = None,
             retries: Optional[int] = None, backoff: float = 1.0, label: str = '') -> dict:
    """GET ``url`` into ``dst``, resuming what ``dst`` already holds.

    Args:
        url (str): http(s) URL; redirects are followed, proxies taken from the
            environment.
        dst (Path): The partial file: appended to with a ``Range`` request when the
            server allows it, rewritten from the start otherwise.
        timeout (float, optional): Seconds without data before an attempt is abandoned
            (default ``$INLINE_MM_DOWNLOAD_TIMEOUT`` or 60).
        retries (int, optional): Further attempts after a failed one (default
            ``$INLINE_MM_DOWNLOAD_RETRIES`` or 4); an HTTP error that another attempt
            cannot change (404, 403, ...) is not retried.
        backoff (float): Pause before the first retry, doubled for each next (at most 30 s).
        label (str): Name shown in the progress and log lines (default the URL).

    Returns:
        dict: ``size``, ``content_type`` and the final ``url`` (after redirects).

    Raises:
        WeightsError: naming the URL and the last failure.
    """
    timeout = _env_number('INLINE_MM_DOWNLOAD_TIMEOUT', 60.) if timeout is None else timeout
    retries = int(_env_number('INLINE_MM_DOWNLOAD_RETRIES', 4)) if retries is None else retries
    dst = Path(dst)
    opener = urllib.request.build_opener()      # environment proxies, redirects
    error: Exception = RuntimeError('no attempt')
    for attempt in range(retries + 1):
        try:
            return _attempt(opener, url, dst, timeout, label or url)
        except urllib.error.HTTPError as e:
            if e.code == 416:           # the partial file is not a prefix of this file
                _remove(dst)
            elif e.code not in _RETRY_STATUS:
                raise WeightsError(f'{url}: HTTP {e.code} {e.reason}.') from None
            error = e
        except (OSError, http.client.HTTPException) as e:   # refused, reset, timed out, cut
            if _unreachable(e):
                # No route or no name: an offline machine, which waiting will not change
                # (retrying only delayed the error by ~15 s).
                raise WeightsError(f'{url}: {_reason(e)}: this machine cannot reach the '
                                   'host (offline, or no DNS); not retried.') from None
            error = e
        if attempt < retries:
            pause = min(backoff * 2 ** attempt, 30.)
            print_log(f'{label or url}: {_reason(error)}; attempt {attempt + 2} of '
                      f'{retries + 1} in {pause:g} s', logger='current', level=logging.WARNING)
            time.sleep(pause)
    kept = f' ({dst.stat().st_size:,} bytes kept to resume)' if dst.is_file() else ''
    raise WeightsError(f'{url}: download failed after {retries + 1} attempt(s): '
                       f'{_reason(error)}{kept}.')


def _unreachable(error: Exception) -> bool:
    """Whether a failed attempt says the host cannot be reached at all: its name does
    not resolve, or the network or host has no route."""
    import errno
    import socket
    if isinstance(error, urllib.error.URLError) and isinstance(error.reason, Exception):
        error = error.reason
    return isinstance(error, socket.gaierror) or getattr(error, 'errno', None) in (
        errno.ENETUNREACH, errno.EHOSTUNREACH)


def _reason(error: Exception) -> str:
    if isinstance(error, urllib.error.HTTPError):
        return f'HTTP {error.code} {error.reason}'
    if isinstance(error, urllib.error.URLError):
        error = error.reason if isinstance(error.reason, Exception) else error
    if isinstance(error, TimeoutError):
        return 'timed out'
    return str(error) or type(error).__name__


def _attempt(opener, url: str, dst: Path, timeout: float, label: str) -> dict:
    have = dst.stat().st_size if dst.is_file() else 0
    headers = {'User-Agent': f'inline_mm/{_version()}'}
    if have:
        headers['Range'] = f'bytes={have}-'
    with opener.open(urllib.request.Request(url, headers=headers), timeout=timeout) as resp:
        if have and resp.status == 206:
            start = re.match(r'bytes (\d+)-', resp.headers.get('Content-Range', ''))
            if not start or int(start[1]) != have:
                _remove(dst)
                raise _Interrupted(f'the server resumed at another offset '
                                   f'({resp.headers.get("Content-Range")!r})')
            mode = 'ab'
        else:                           # the whole file (a server that ignores Range)
            have, mode = 0, 'wb'
        length = resp.headers.get('Content-Length')
        total = have + int(length) if length and length.isdigit() else None
        progress = _Progress(label, total, have)
        with open(dst, mode) as f:
            for chunk in iter(lambda: resp.read(_CHUNK), b''):
                f.write(chunk)
                progress.update(len(chunk))
            f.flush()
            os.fsync(f.fileno())
        progress.close()
        got = dst.stat().st_size
        if total is not None and got < total:
            raise _Interrupted(f'the connection closed after {got:,} of {total:,} bytes')
        return dict(size=got, content_type=resp.headers.get('Content-Type', ''),
                    url=resp.geturl())


def _version() -> str:
    try:
        return importlib.metadata.version('inline_mm')
    except importlib.metadata.PackageNotFoundError:     # a checkout on sys.path
        return 'dev'


def format_size(n: float) -> str:
    for unit in ('B', 'kB', 'MB', 'GB'):
        if n < 1000 or unit == 'GB':
            return f'{n:.0f} {unit}' if unit == 'B' else f'{n:.1f} {unit}'
        n /= 1000


class _Progress:
    """Size, speed and time left, redrawn on one line of a terminal; a log line at the
    start and one at the end otherwise (logs, CI, a training job's output)."""

    def __init__(self, label: str, total: Optional[int], done: int = 0, stream=None,
                 interval: float = 0.2):
        self.label, self.total, self.start_at = label, total, done
        self.done, self.stream, self.interval = done, stream or sys.stderr, interval
        self.tty = hasattr(self.stream, 'isatty') and self.stream.isatty()
        self.t0 = self.shown = time.monotonic()
        if not self.tty:
            size = format_size(total) if total is not None else 'size unknown'
            resumed = f', resuming at {format_size(done)}' if done else ''
            print_log(f'Downloading {label} ({size}{resumed})', logger='current')

    def speed(self) -> float:
        return (self.done - self.start_at) / max(time.monotonic() - self.t0, 1e-6)

    def line(self) -> str:
        speed = self.speed()
        text = f'{self.label}: {format_size(self.done)}'
        if self.total:
            left = (self.total - self.done) / speed if speed > 0 else float('inf')
            eta = time.strftime('%H:%M:%S', time.gmtime(left)) if left < 86400 else '--:--:--'
            text += f' / {format_size(self.total)} {100 * self.done / self.total:3.0f}%'
            text += f' {format_size(speed)}/s ETA {eta}'
        else:
            text += f' {format_size(speed)}/s'
        return text

    def update(self, n: int):
        self.done += n
        if self.tty and time.monotonic() - self.shown >= self.interval:
            self.shown = time.monotonic()
            self.stream.write('\r' + self.line() + '\033[K')
            self.stream.flush()

    def close(self):
        if self.tty:
            self.stream.write('\r' + self.line() + '\033[K\n')
            self.stream.flush()
        else:
            print_log(f'Downloaded {self.label}: {format_size(self.done)} in '
                      f'{time.monotonic() - self.t0:.1f} s ({format_size(self.speed())}/s)',
                      logger='current')
