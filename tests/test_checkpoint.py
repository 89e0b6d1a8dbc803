"""Reading checkpoints: safe by default, clear errors, the converter tool."""
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from inline_mm.models.checkpoint import CheckpointError, read_checkpoint

ROOT = Path(__file__).resolve().parents[1]


class Gadget:
    """An arbitrary object: unpickling it would run code of this class."""

    def __init__(self, payload='x'):
        self.payload = payload


def _fake_yacs():
    """A stand-in for yacs.config.CfgNode, pickled the way the official script did."""
    pkg, mod = types.ModuleType('yacs'), types.ModuleType('yacs.config')

    class CfgNode(dict):
        def __init__(self, init=None):
            super().__init__(init or {})
            self.__dict__['__immutable__'] = False

    CfgNode.__module__, CfgNode.__qualname__ = 'yacs.config', 'CfgNode'
    mod.CfgNode, pkg.config = CfgNode, mod
    return {'yacs': pkg, 'yacs.config': mod}, CfgNode


def test_official_file_with_yacs_config_loads_inertly(tmp_path, golden, monkeypatch):
    path, _ = golden('inline_swin_tiny_224')
    sd = torch.load(path, weights_only=True)['model']
    modules, CfgNode = _fake_yacs()
    with monkeypatch.context() as m:
        for k, v in modules.items():
            m.setitem(sys.modules, k, v)
        cfg = CfgNode({'MODEL': CfgNode({'TYPE': 'inline_swin', 'DROP_PATH_RATE': 0.2})})
        torch.save({'model': sd, 'config': cfg, 'epoch': 299}, tmp_path / 'official.pth')
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


@pytest.mark.parametrize('damage', ['truncate', 'garbage', 'empty'])
def test_corrupt_files_give_a_clear_error(tmp_path, golden, damage):
    path, _ = golden('inline_swin_tiny_224')
    data = Path(path).read_bytes()
    bad = tmp_path / 'bad.pth'
    bad.write_bytes({'truncate': data[:len(data) // 2], 'garbage': b'\x00not a checkpoint' * 50,
                     'empty': b''}[damage])
    with pytest.raises(CheckpointError, match='corrupt or truncated'):
        read_checkpoint(bad)


def test_corrupt_safetensors(tmp_path):
    bad = tmp_path / 'bad.safetensors'
    bad.write_bytes(b'{"nonsense": 1}')
    with pytest.raises(CheckpointError, match='corrupt or truncated'):
        read_checkpoint(bad)


def test_convert_tool_writes_tensors_only_file(tmp_path, golden):
    from inline_mm.models import InLineSwin
    path, _ = golden('inline_swin_tiny_224')
    dst = tmp_path / 'swin.safetensors'
    out = subprocess.run([sys.executable, str(ROOT / 'tools' / 'convert_checkpoint.py'), path,
                          str(dst)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert 'InLineSwin' in out.stdout
    from safetensors.torch import load_file
    converted = load_file(dst)
    assert 'norm3.weight' in converted and not any(k.startswith('head.') for k in converted)
    model = InLineSwin(embed_dims=16, depths=(2, 2, 2, 2), num_heads=(1, 2, 4, 8),
                       init_cfg=dict(type='Pretrained', checkpoint=str(dst)))
    model.init_weights()
    assert torch.equal(model.norm3.weight, converted['norm3.weight'])


def test_convert_tool_reports_errors(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / 'tools' / 'convert_checkpoint.py'),
                          str(tmp_path / 'missing.pth'), str(tmp_path / 'o.safetensors')],
                         capture_output=True, text=True)
    assert out.returncode != 0 and 'missing.pth' in out.stderr
