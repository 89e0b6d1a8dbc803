"""Reading checkpoints: safe by default, clear errors, the converter tool."""
import io
import pickle
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from conftest import GOLDEN

from inline_mm.models.checkpoint import CheckpointError, describe_non_checkpoint, read_checkpoint

ROOT = Path(__file__).resolve().parents[1]


class Gadget:
    """An arbitrary object: unpickling it would run code of this class."""

    def __init__(self, payload='x'):
        self.payload = payload


def test_official_file_with_yacs_config_loads_inertly(tmp_path, golden, save_with_yacs_config):
    path, _ = golden('inline_swin_tiny_224')
    sd = torch.load(path, weights_only=True)['model']
    save_with_yacs_config(tmp_path / 'official.pth', {'model': sd, 'epoch': 299},
                          {'MODEL': {'TYPE': 'inline_swin', 'DROP_PATH_RATE': 0.2}})
    assert 'yacs' not in sys.modules
    ckpt = read_checkpoint(tmp_path / 'official.pth')
    assert 'yacs' not in sys.modules            # nothing of yacs was imported or run
    assert torch.equal(ckpt['model']['patch_embed.proj.weight'], sd['patch_embed.proj.weight'])
    assert ckpt['config']['MODEL']['TYPE'] == 'inline_swin'


def test_arbitrary_objects_are_refused_unless_allowed(tmp_path):
    path = tmp_path / 'gadget.pth'
    torch.save({'model': {'w': torch.ones(2)}, 'extra': Gadget()}, path)
    with pytest.raises(CheckpointError, match=r'(?s)Gadget.*allow_pickle=True'):
        read_checkpoint(path)
    ckpt = read_checkpoint(path, allow_pickle=True)
    assert isinstance(ckpt['extra'], Gadget)


def _zip_of(members: dict) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, 'w') as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


#: kind -> (the file's bytes, given a real checkpoint's; what the error must say)
NOT_CHECKPOINTS = {
    'empty': (lambda real: b'', r'is empty \(0 bytes\)'),
    'text': (lambda real: b'wget: unable to resolve host address\n',
             r"not a PyTorch checkpoint: it is text beginning 'wget: unable to resolve"),
    'html': (lambda real: b'\n<!DOCTYPE html><html><head><title>Sign in - Seafile</title></head>',
             r"it is an HTML page titled 'Sign in - Seafile'.*saved in place of the file"),
    'jpeg': (lambda real: b'\xff\xd8\xff\xe0\x00\x10JFIF\x00' + bytes(range(256)) * 4,
             r'it is a JPEG image \(1,035 bytes\)'),
    'random': (lambda real: bytes.fromhex('a41ac498') + bytes(range(7, 250)),
               r'it is binary data of an unknown format, beginning a4 1a c4 98 07 08'),
    'git_lfs': (lambda real: b'version https://git-lfs.github.com/spec/v1\noid sha256:ab\n',
                r'it is a Git LFS pointer.*git lfs pull'),
    'zip': (lambda real: _zip_of({'weights/readme.txt': 'hi'}),
            r'it is a zip archive of other files \(weights/readme.txt\)'),
    'truncated': (lambda real: real[:len(real) // 2],
                  r'is a PyTorch checkpoint cut short .*the download or copy was interrupted'),
    'damaged': (lambda real: _zip_of({'archive/data.pkl': b'\x80\x02garbage',
                                      'archive/version': '3'}),
                r'is a PyTorch checkpoint that torch cannot read \(.+\): it is probably damaged'),
}


@pytest.fixture(params=list(NOT_CHECKPOINTS))
def not_a_checkpoint(request, tmp_path, golden):
    """(path of a file that is no usable checkpoint, regex of what its error says)."""
    make, says = NOT_CHECKPOINTS[request.param]
    path = tmp_path / 'inline_swin_t.pth'
    path.write_bytes(make(Path(golden('inline_swin_tiny_224')[0]).read_bytes()))
    return path, says


def _assert_explained(excinfo, says):
    """The error says what the file is and what to do, and nowhere (chained errors
    included) repeats torch's advice to load with weights_only=False."""
    assert re.search(says, str(excinfo.value)), str(excinfo.value)
    assert 'checkpoints/README.md' in str(excinfo.value)
    error, shown = excinfo.value, []
    while error is not None:             # what a traceback prints: the chain of causes
        shown.append(str(error))
        error = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
    assert not any('weights_only' in m for m in shown), shown


@pytest.mark.parametrize('allow_pickle', [False, True])
def test_file_that_is_no_checkpoint_says_what_it_is(not_a_checkpoint, allow_pickle):
    path, says = not_a_checkpoint
    with pytest.raises(CheckpointError) as excinfo:
        read_checkpoint(path, allow_pickle=allow_pickle)
    _assert_explained(excinfo, says)


def test_backbone_init_cfg_with_no_checkpoint_says_what_it_is(not_a_checkpoint):
    from mmdet.registry import MODELS
    from mmengine.registry import DefaultScope

    from inline_mm.models import FAMILIES
    path, says = not_a_checkpoint
    with DefaultScope.overwrite_default_scope('mmdet'):
        model = MODELS.build(dict(type='InLineSwin', **FAMILIES['InLineSwin'].smoke,
                                  init_cfg=dict(type='Pretrained', checkpoint=str(path))))
    with pytest.raises(CheckpointError) as excinfo:
        model.init_weights()
    _assert_explained(excinfo, says)


def test_mmengine_load_from_says_what_the_file_is(not_a_checkpoint):
    """``load_from`` / ``--resume`` / test.py's checkpoint, with inline_mm.engine's
    behaviours on (conftest), as the project's tools and configs run."""
    from mmengine.runner.checkpoint import _load_checkpoint
    path, says = not_a_checkpoint
    with pytest.raises(CheckpointError) as excinfo:
        _load_checkpoint(str(path), map_location='cpu')
    _assert_explained(excinfo, says)


@pytest.mark.subprocess
def test_tools_test_names_a_checkpoint_that_is_no_checkpoint(tmp_path):
    """tools/test.py CONFIG PAGE.pth: mmengine's loader, as a user meets it."""
    from conftest import NANO_DET

    from inline_mm.datasets.toy.coco import make_coco_toy
    make_coco_toy(str(tmp_path / 'coco'), num_train=1, num_val=1, size=64, seed=0)
    page = tmp_path / 'epoch_12.pth'
    page.write_text('<!DOCTYPE html><html><head><title>Sign in</title></head></html>')
    out = subprocess.run(
        [sys.executable, str(ROOT / 'tools' / 'test.py'), str(NANO_DET), str(page),
         '--work-dir', str(tmp_path / 'wd'), '--cfg-options',
         f'test_dataloader.dataset.data_root={tmp_path}/coco/', 'test_dataloader.num_workers=0',
         'test_dataloader.persistent_workers=False', 'model.backbone.init_cfg=None',
         f'test_evaluator.ann_file={tmp_path}/coco/annotations/instances_val2017.json'],
        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 1
    assert (f"CheckpointError: {page} is not a PyTorch checkpoint: it is an HTML page titled "
            "'Sign in'") in out.stderr, out.stderr[-3000:]
    assert 'weights_only' not in out.stderr


def test_mmengine_load_from_passes_other_errors_through(tmp_path):
    from mmengine.runner.checkpoint import _load_checkpoint
    path = tmp_path / 'gadget.pth'
    torch.save({'state_dict': {'w': torch.ones(2)}, 'extra': Gadget()}, path)
    with pytest.raises(pickle.UnpicklingError, match='Gadget'):   # torch's own refusal
        _load_checkpoint(str(path), map_location='cpu')
    with pytest.raises(FileNotFoundError, match='nope.pth'):
        _load_checkpoint(str(tmp_path / 'nope.pth'), map_location='cpu')


@pytest.mark.parametrize('path', sorted(GOLDEN.glob('*.pth')), ids=lambda p: p.stem)
def test_real_checkpoints_still_load(path):
    from mmengine.runner.checkpoint import _load_checkpoint
    ckpt = read_checkpoint(path)
    assert isinstance(ckpt, dict) and ckpt
    assert describe_non_checkpoint(path) is None
    assert _load_checkpoint(str(path), map_location='cpu').keys() == ckpt.keys()


def test_corrupt_safetensors(tmp_path):
    bad = tmp_path / 'bad.safetensors'
    bad.write_bytes(b'{"nonsense": 1}')
    with pytest.raises(CheckpointError, match='corrupt or truncated'):
        read_checkpoint(bad)


@pytest.mark.subprocess
def test_convert_tool_writes_tensors_only_file(tmp_path, golden):
    from inline_mm.models import InLineSwin
    path, _ = golden('inline_swin_tiny_224')
    dst = tmp_path / 'swin.safetensors'
    out = subprocess.run([sys.executable,
                          str(ROOT / 'tools' / 'model_converters' / 'convert_checkpoint.py'),
                          path, str(dst)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert 'InLineSwin' in out.stdout
    from safetensors.torch import load_file
    converted = load_file(dst)
    assert 'norm3.weight' in converted and not any(k.startswith('head.') for k in converted)
    model = InLineSwin(embed_dims=16, depths=(2, 2, 2, 2), num_heads=(1, 2, 4, 8),
                       init_cfg=dict(type='Pretrained', checkpoint=str(dst)))
    model.init_weights()
    assert torch.equal(model.norm3.weight, converted['norm3.weight'])


@pytest.mark.subprocess
def test_convert_tool_reports_errors(tmp_path):
    out = subprocess.run([sys.executable,
                          str(ROOT / 'tools' / 'model_converters' / 'convert_checkpoint.py'),
                          str(tmp_path / 'missing.pth'), str(tmp_path / 'o.safetensors')],
                         capture_output=True, text=True)
    assert out.returncode != 0 and 'missing.pth' in out.stderr
