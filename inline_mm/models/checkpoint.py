"""Reading checkpoints safely and loading them into the InLine backbones.

Family-neutral: each family declares its own official-key pattern, presets and
converter (in its file); the functions here take them as arguments.

Accepted inputs (all through ``init_cfg=dict(type='Pretrained', checkpoint=PATH)``):

* the official classification files (``{'model': state_dict, ...}``; CSwin also has
  ``state_dict_ema``; the training script pickled a yacs config object into them),
* a plain state dict,
* an OpenMMLab checkpoint (``state_dict`` with ``backbone.`` prefixes),
* the project's own converted file (``.safetensors``, tensors only).

``PATH`` may also be a URL or a short name (``'inline://swin_t'``): a *locator* turns it
into a local file before anything is read.  This module knows no network or cache;
``import inline_mm`` installs :func:`.weights.resolve` (the resolver that does) as the
locator (:func:`set_locator`), and without one a reference is read as a local path.

Nothing here unpickles arbitrary objects.  ``torch.load(weights_only=True)`` is
used throughout; the one kind of foreign object the official files are known to
carry (the yacs ``CfgNode`` holding the training config) is read as an inert
dict that executes no code of yacs.  Anything else is refused with an error
naming it, unless the caller passes ``allow_pickle=True`` (or sets
``INLINE_MM_ALLOW_PICKLE=1``) for a file they trust.
"""
import logging
import os
import pickle
import re
import struct
import zipfile
from collections import OrderedDict
from typing import Callable, Dict, Iterable, Optional, Sequence, Tuple

import torch
try:
    from mmengine.logging import print_log
except ModuleNotFoundError as e:  # timm-only installs (inline_mm.timm) have no mmengine
    if e.name is None or e.name.split('.')[0] != 'mmengine':
        raise

    def print_log(msg, logger=None, level=logging.INFO):
        logging.getLogger('inline_mm').log(level, msg)

__all__ = ['CheckpointError', 'read_checkpoint', 'extract_state_dict', 'load_pretrained',
           'save_converted', 'matches_keys', 'identify_family', 'check_layout',
           'describe_non_checkpoint', 'unreadable_message', 'GET_A_CHECKPOINT',
           'set_locator', 'locate']

#: foreign globals the official checkpoints are known to hold (metadata, no tensors).
KNOWN_METADATA_GLOBALS = ('yacs.config.CfgNode', 'argparse.Namespace')


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used: unreadable, unsafe, or of another model."""


_locator: Optional[Callable[[str], str]] = None


def set_locator(locator: Optional[Callable[[str], str]]):
    """Install the function that turns a checkpoint reference (a path, a URL, a short
    name) into a local file for :func:`load_pretrained`; returns the one it replaces."""
    global _locator
    previous, _locator = _locator, locator
    return previous


def locate(checkpoint) -> str:
    """The local file that ``checkpoint`` refers to (itself without a locator)."""
    checkpoint = os.fspath(checkpoint)
    return _locator(checkpoint) if _locator is not None else checkpoint


class _InertDict(dict):
    """Stands in for a pickled metadata object (e.g. yacs ``CfgNode``).

    It keeps the pickled fields as plain data and has no behaviour, so reading a
    file never runs code from the class the file names.
    """

    def __setstate__(self, state):
        self.__dict__['_pickled_state'] = state


_INERT_CLASSES = {name: type(name.rsplit('.', 1)[1], (_InertDict,), {'__module__': __name__})
                  for name in KNOWN_METADATA_GLOBALS}


def _weights_only_globals() -> dict:
    """What torch's ``weights_only`` loader allows (its own list plus user additions)."""
    from torch import _weights_only_unpickler as wou
    allowed = dict(wou._get_allowed_globals())
    allowed.update(wou._get_user_allowed_globals())
    return allowed


class _RestrictedUnpickler(pickle.Unpickler):
    """Resolves only what ``weights_only`` allows, plus inert stand-ins for the known
    metadata classes; every other global is refused before anything is called."""

    def find_class(self, module, name):
        full = f'{module}.{name}'
        if full in _INERT_CLASSES:
            return _INERT_CLASSES[full]
        allowed = _weights_only_globals()
        if full in allowed:
            return allowed[full]
        raise pickle.UnpicklingError(f'Unsupported global: {full}')


class _restricted_pickle:  # noqa: N801  (a stand-in for the ``pickle`` module)
    Unpickler = _RestrictedUnpickler
    load = staticmethod(lambda f, **kw: _RestrictedUnpickler(f, **kw).load())
    __name__ = 'inline_mm.models.checkpoint._restricted_pickle'


def _allow_pickle_default() -> bool:
    return os.environ.get('INLINE_MM_ALLOW_PICKLE', '') in ('1', 'true', 'yes')


def read_checkpoint(path: str, allow_pickle: Optional[bool] = None,
                    map_location='cpu') -> dict:
    """Read a checkpoint file into a dict without running foreign code.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        CheckpointError: corrupt/truncated file, or it holds pickled objects other
            than known metadata and ``allow_pickle`` is not set.
    """
    path = os.fspath(path)
    if allow_pickle is None:
        allow_pickle = _allow_pickle_default()
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f'checkpoint not found: {path!r}. Put the file there or fix the path in the '
            "config; an official file can also be named, e.g. 'inline://swin_t' (see "
            'checkpoints/README.md).')
    if path.endswith('.safetensors'):
        from safetensors import SafetensorError
        from safetensors.torch import load_file
        try:
            return dict(load_file(path, device=str(map_location)))
        except (SafetensorError, OSError, ValueError) as e:
            raise CheckpointError(f'{path}: not a readable safetensors file ({e}); the file is '
                                  'corrupt or truncated: convert or download it again.') from e
    if allow_pickle:
        print_log(f'Loading {path} with full unpickling (allow_pickle=True): only do this for '
                  'files you trust.', logger='current', level=logging.WARNING)
        return _torch_load(path, map_location, weights_only=False)
    try:
        return _torch_load(path, map_location, weights_only=True)
    except pickle.UnpicklingError:
        pass
    # The file names globals beyond plain tensors: allowed only if they are known metadata.
    foreign = [g for g in _unsafe_globals(path) if g not in KNOWN_METADATA_GLOBALS]
    if foreign:
        raise CheckpointError(
            f'{path} contains pickled Python objects that inline_mm will not unpickle '
            f'({", ".join(foreign)}): unpickling can run arbitrary code. If you trust this file, '
            'pass allow_pickle=True in the init_cfg (or set INLINE_MM_ALLOW_PICKLE=1), or '
            'convert it once with tools/model_converters/convert_checkpoint.py --allow-pickle '
            'into a '
            'tensors-only .safetensors file.')
    return _torch_load(path, map_location, weights_only=False, pickle_module=_restricted_pickle)


def _torch_load(path, map_location, weights_only, **kwargs):
    """``torch.load``; unreadable files become :class:`CheckpointError`. A refused global
    of a readable checkpoint stays an ``UnpicklingError`` for the caller to handle."""
    try:
        return torch.load(path, map_location=map_location, weights_only=weights_only, **kwargs)
    except Exception as e:  # arbitrary bytes make the unpickler raise almost anything
        message = unreadable_message(path, e)
        if message is None and weights_only:
            raise
        # ``from None``: torch's own message advises weights_only=False, which is wrong
        # for a file that is no checkpoint and unsafe for one that is not trusted.
        raise CheckpointError(message or f'{path}: cannot unpickle ({_torch_reason(e)})') from None


#: what to do about a file that is not (or no longer) a readable checkpoint
GET_A_CHECKPOINT = ('Point the config at the right file, or download it again: the official '
                    'ImageNet files and their links are listed in checkpoints/README.md; '
                    'tools/model_converters/convert_checkpoint.py turns a readable checkpoint '
                    'into a '
                    'tensors-only .safetensors file.')

# torch.save's legacy (non-zip) format begins with a pickled magic number (a LONG1 opcode)
_LEGACY_MAGIC = b'\x8a\x0a' + (0x1950a86a20f9469cfc6c).to_bytes(10, 'little')
# (prefix, what it is, what to do) of formats a wrong download or path turns out to be
_SIGNATURES = (
    (b'\xff\xd8\xff', 'a JPEG image', ''),
    (b'\x89PNG\r\n\x1a\n', 'a PNG image', ''),
    (b'GIF8', 'a GIF image', ''),
    (b'%PDF', 'a PDF document', ''),
    (b'\x1f\x8b', 'gzip-compressed data', 'unpack it first'),
    (b'BZh', 'bzip2-compressed data', 'unpack it first'),
    (b'\xfd7zXZ\x00', 'xz-compressed data', 'unpack it first'),
    (b"7z\xbc\xaf\x27\x1c", 'a 7-Zip archive', 'unpack it first'),
    (b'\x89HDF\r\n\x1a\n', 'an HDF5 file', 'Keras/TensorFlow weights do not load here'),
    (b'\x93NUMPY', 'a NumPy .npy array', ''),
)


def describe_non_checkpoint(path) -> Optional[str]:
    """What the file at ``path`` is, when it is not a PyTorch checkpoint.

    Reads only the head of the file (and, for a zip, its directory), so it is cheap to
    call after ``torch.load`` failed.

    Returns:
        str or None: A phrase following the path, e.g. ``'is not a PyTorch checkpoint: it
        is an HTML page ...'`` or ``'is a PyTorch checkpoint cut short ...'``; None when
        the file looks like a complete ``torch.save`` archive (a zip holding a
        ``data.pkl``, or the legacy format).
    """
    size = os.path.getsize(path)
    with open(path, 'rb') as f:
        head = f.read(4096)
    if not head:
        return 'is empty (0 bytes): the download or copy did not complete'
    if head.startswith((b'PK\x03\x04', b'PK\x05\x06')):
        return _describe_zip(path, head, size)
    if head[2:14] == _LEGACY_MAGIC:
        return None
    if len(head) > 9 and head[8:9] == b'{' and struct.unpack('<Q', head[:8])[0] < size:
        return 'is a safetensors file: name it *.safetensors to have it read as one'
    what, todo = _identify(head)
    return (f'is not a PyTorch checkpoint: it is {what} ({size:,} bytes)'
            + (f'; {todo}' if todo else ''))


def _identify(head: bytes) -> Tuple[str, str]:
    """(what ``head`` begins, what to do) for a file that is no torch archive."""
    for prefix, what, todo in _SIGNATURES:
        if head.startswith(prefix):
            return what, todo
    if head[257:262] == b'ustar':
        return 'a tar archive', 'unpack it first'
    text = _as_text(head)
    if text is not None:
        return _identify_text(text)
    if head[:1] == b'\x80' and 2 <= head[1] <= 5:
        return 'a Python pickle not written by torch.save', 'save the weights with torch.save'
    return f'binary data of an unknown format, beginning {head[:8].hex(" ")}', ''


def _describe_zip(path, head, size) -> Optional[str]:
    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
    except (zipfile.BadZipFile, OSError):
        # torch.save writes the archive's directory last: a cut-short file lacks it.
        # The first entry's name (local header, offset 30) tells whose archive it was.
        first = head[30:30 + int.from_bytes(head[26:28], 'little')]
        whose = 'a PyTorch checkpoint' if first.endswith(b'data.pkl') else 'a zip archive'
        return (f'is {whose} cut short ({size:,} bytes, the end of the archive is missing): '
                'the download or copy was interrupted')
    if any(n == 'data.pkl' or n.endswith('/data.pkl') for n in names):
        return None
    shown = ', '.join(names[:3]) + (', ...' if len(names) > 3 else '')
    return (f'is not a PyTorch checkpoint: it is a zip archive of other files '
            f'({shown or "none"})')


def _as_text(head: bytes) -> Optional[str]:
    """``head`` decoded, when it reads as text (UTF-8, almost all printable)."""
    if b'\x00' in head:
        return None
    text = head.decode('utf-8', errors='replace')
    odd = sum(not (c.isprintable() or c in '\t\r\n') for c in text)
    return text if odd <= len(text) // 50 else None


def _identify_text(text: str) -> Tuple[str, str]:
    start = text.lstrip().lower()
    if start.startswith('version https://git-lfs'):
        return 'a Git LFS pointer', 'fetch the file itself (git lfs pull)'
    if start.startswith(('<!doctype html', '<html')) or '<html' in start[:1000]:
        title = re.search(r'<title[^>]*>([^<]*)', text, re.IGNORECASE)
        title = title.group(1).strip()[:60] if title else ''
        return (f'an HTML page{f" titled {title!r}" if title else ""}',
                'a web page (login, error or redirect) was saved in place of the file')
    if start.startswith('<?xml'):
        return 'an XML document', 'probably an error reply of the download site'
    first = next((line.strip() for line in text.splitlines() if line.strip()), '')
    return f'{"JSON " if start[:1] in "{[" else ""}text beginning {first[:60]!r}', ''


def _torch_reason(error: Exception) -> str:
    """The cause in torch's message, without its advice about ``weights_only``."""
    text = str(error)
    if 'WeightsUnpickler error:' in text:
        text = text.split('WeightsUnpickler error:', 1)[1]
    lines = [line.strip() for line in text.splitlines()
             if line.strip() and 'weights_only' not in line]
    return lines[0] if lines else type(error).__name__


def unreadable_message(path, error: Exception) -> Optional[str]:
    """The error for a file that ``torch.load`` failed on with ``error``: what the file
    is, and what to do; never torch's advice to load with ``weights_only=False``.

    Returns None when ``error`` is torch refusing pickled objects of an intact
    checkpoint: that is about trust, not about the file, and torch's message stands.
    """
    what = describe_non_checkpoint(path)
    if what is None:
        if isinstance(error, pickle.UnpicklingError) and _unsafe_globals(path):
            return None
        what = (f'is a PyTorch checkpoint that torch cannot read ({_torch_reason(error)}): it '
                'is probably damaged')
    return f'{path} {what}. {GET_A_CHECKPOINT}'


def _unsafe_globals(path) -> list:
    """Globals the file names that plain ``weights_only`` loading refuses ([] if unreadable)."""
    try:
        return torch.serialization.get_unsafe_globals_in_checkpoint(path)
    except Exception:  # an unreadable file names nothing we could allow
        return []


def extract_state_dict(ckpt: dict, checkpoint_key: Optional[str] = None) -> Dict[str, torch.Tensor]:
    """The backbone's tensors from any accepted checkpoint layout.

    ``checkpoint_key`` picks a sub-dict explicitly (e.g. ``'state_dict_ema'``);
    otherwise ``state_dict`` (OpenMMLab), then ``model`` (official), then the dict
    itself.  OpenMMLab ``backbone.`` and DDP ``module.`` prefixes are removed; when
    a checkpoint holds a whole detector/segmentor only its backbone is kept.
    """
    if not isinstance(ckpt, dict):
        raise CheckpointError(f'expected a dict of tensors, got {type(ckpt).__name__}')
    if checkpoint_key is not None:
        if checkpoint_key not in ckpt:
            raise CheckpointError(f'checkpoint has no {checkpoint_key!r} entry; it has '
                                  f'{sorted(ckpt)[:10]}')
        sd = ckpt[checkpoint_key]
    else:
        sd = next((ckpt[k] for k in ('state_dict', 'model') if isinstance(ckpt.get(k), dict)),
                  ckpt)
    sd = OrderedDict((k, v) for k, v in sd.items() if isinstance(v, torch.Tensor))
    if not sd:
        raise CheckpointError('checkpoint contains no tensors')
    if any(k.startswith('module.') for k in sd):
        sd = OrderedDict((k[len('module.'):] if k.startswith('module.') else k, v)
                         for k, v in sd.items())
    if any(k.startswith('backbone.') for k in sd):
        sd = OrderedDict((k[len('backbone.'):], v) for k, v in sd.items()
                         if k.startswith('backbone.'))
    return sd


def load_pretrained(model: torch.nn.Module, checkpoint: str, prefix: Optional[str] = None,
                    allow_pickle: Optional[bool] = None, checkpoint_key: Optional[str] = None,
                    min_match: float = 0.9, map_location='cpu') -> dict:
    """Load ``checkpoint`` into an InLine backbone, checking that it fits.

    The state dict is unwrapped (:func:`extract_state_dict`), converted from the
    official layout by ``model.convert_checkpoint`` (idempotent), then compared
    with the model: any tensor with another shape, or fewer than ``min_match`` of
    the backbone's loadable tensors found, is an error (another variant, another
    backbone).  Counts of matched / missing / ignored tensors are logged.
    ``checkpoint`` is a path, or a URL or short name that the locator
    (:func:`set_locator`) turns into one.

    Returns:
        dict: ``matched``, ``missing`` and ``unexpected`` key lists.
    """
    name = type(model).__name__
    checkpoint = os.fspath(checkpoint)
    path = locate(checkpoint)
    ckpt = read_checkpoint(path, allow_pickle=allow_pickle, map_location=map_location)
    if prefix:
        inner = extract_state_dict(ckpt, checkpoint_key) if 'state_dict' in ckpt else ckpt
        if not prefix.endswith('.'):
            prefix += '.'
        ckpt = {k[len(prefix):]: v for k, v in inner.items() if k.startswith(prefix)}
    state = model.convert_checkpoint(extract_state_dict(ckpt, checkpoint_key))

    own = model.state_dict()
    fresh = set(model.fresh_keys())
    mismatched = [(k, tuple(v.shape), tuple(own[k].shape)) for k, v in state.items()
                  if k in own and own[k].shape != v.shape]
    if mismatched:
        examples = '; '.join(f'{k}: checkpoint {a} vs model {b}' for k, a, b in mismatched[:3])
        raise CheckpointError(
            f'{checkpoint} does not fit this {name} ({model.arch_name}): {len(mismatched)} '
            f'tensor(s) have other shapes, e.g. {examples}. It is probably a checkpoint of '
            'another variant or backbone: pick the matching arch or file.')
    matched = [k for k in state if k in own]
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    expected = [k for k in own if k not in fresh]
    found = sum(k in state for k in expected)
    if found < min_match * len(expected):
        absent = [k for k in expected if k not in state]
        if absent and all(re.search(_RESIDUAL_KEY, k) for k in absent):
            cause = ('All that is missing is the predicted local term (residual.*): it is '
                     'probably a checkpoint of a model built with '
                     "inline_cfg=dict(local_residual=False); build this one so too.")
        else:
            cause = 'It is probably a checkpoint of another model.'
        raise CheckpointError(
            f'{checkpoint} provides only {found} of the {len(expected)} tensors of this {name} '
            f'({model.arch_name}) (needs {min_match:.0%}); first unknown keys: '
            f'{unexpected[:5]}. {cause}')
    model.load_state_dict(state, strict=False)
    source = checkpoint if path == checkpoint else f'{checkpoint} ({path})'
    # A model without the local term (inline_cfg local_residual=False) leaves the
    # checkpoint's residual.* unused: say so rather than leave it a bare count.
    unused_local = sum(bool(re.search(_RESIDUAL_KEY, k)) for k in unexpected)
    why = f'; {unused_local} of them the local term this model does not have' \
        if unused_local else ''
    print_log(f'{name}: loaded {len(matched)} tensors from {source}; '
              f'{len(missing)} missing ({_short(missing)}), '
              f'{len(unexpected)} ignored ({_short(unexpected)}{why})', logger='current')
    return dict(matched=matched, missing=missing, unexpected=unexpected)


#: the parameters of InLine's predicted local term (absent with ``local_residual=False``)
_RESIDUAL_KEY = r'\.residual\.\d+\.(weight|bias)$'


def _short(keys, n=4):
    return ', '.join(keys[:n]) + (', ...' if len(keys) > n else '') if keys else 'none'


def save_converted(state: Dict[str, torch.Tensor], path: str, metadata: Optional[dict] = None):
    """Write a tensors-only checkpoint (``.safetensors``; ``.pth`` gets a plain dict)."""
    state = {k: v.detach().contiguous().cpu() for k, v in state.items()}
    if path.endswith('.safetensors'):
        from safetensors.torch import save_file
        save_file(state, path, metadata={k: str(v) for k, v in (metadata or {}).items()})
    else:
        torch.save({'state_dict': state, 'meta': dict(metadata or {})}, path)


def matches_keys(keys: Iterable[str], patterns: Sequence[str]) -> bool:
    """Whether every regex of ``patterns`` matches (``re.search``) at least one key."""
    keys = list(keys)
    return all(any(re.search(p, k) for k in keys) for p in patterns)


def identify_family(state: Dict[str, torch.Tensor],
                    families: Iterable[Tuple[str, Sequence[str]]]) -> Optional[str]:
    """The name of the first family whose key patterns all match ``state``'s keys
    (official or converted layout), or None. ``families``: ``(name, patterns)`` pairs."""
    keys = list(state)
    return next((name for name, patterns in families if matches_keys(keys, patterns)), None)


def check_layout(state: Dict[str, torch.Tensor], name: str, family: Optional[str],
                 depths: Sequence[int], arch_name: str = 'custom',
                 presets: Optional[dict] = None,
                 block_key: str = r'stages\.(?P<stage>\d+)\.blocks\.(?P<block>\d+)\.') -> None:
    """Refuse a converted state dict of another backbone family or other stage depths.

    ``load_pretrained`` catches other widths (shapes) and too little coverage; what
    it cannot see is a deeper variant of the same widths (InLine-PVT-S loaded into
    PVT-T would fill every tensor and silently drop the extra blocks).

    Args:
        state: The converted state dict.
        name (str): The model's family (class name).
        family (str, optional): The family ``state`` was identified as
            (:func:`identify_family`); None (no known family) passes: the coverage
            check of :func:`load_pretrained` reports it.
        depths (Sequence[int]): The model's blocks per stage.
        arch_name (str): The model's preset name (for the message).
        presets (dict, optional): name -> dict with ``depths``; names the variant the
            checkpoint is probably of.
        block_key (str): Regex of a block's keys with groups ``block`` and, for
            families with several stages, ``stage``.
    """
    if family is None:
        return
    if family != name:
        raise CheckpointError(f'this is a checkpoint of {family}, not of {name}: build '
                              f'type={family!r} or load a {name} checkpoint.')
    found = {}
    for k in state:
        m = re.match(block_key, k)
        if m:
            stage = int(m.groupdict().get('stage') or 0)
            found[stage] = max(found.get(stage, 0), int(m['block']) + 1)
    if not found:
        return
    found_depths = tuple(found.get(i, 0) for i in range(max(max(found) + 1, len(depths))))
    if found_depths != tuple(depths):
        guess = [a for a, p in (presets or {}).items() if tuple(p['depths']) == found_depths]
        hint = f" (arch={guess[0]!r})" if guess else ''
        raise CheckpointError(
            f'checkpoint of {name} with depths {found_depths}{hint}, but this {name} '
            f'({arch_name}) has depths {tuple(depths)}: it is another variant. Build the '
            'model with the matching arch or load the matching file.')
