#!/usr/bin/env python
"""Record the state-dict keys and shapes of every shipped config's backbone.

    python tools/dev/make_backbone_keys.py                    # this checkout's models
    python tools/dev/make_backbone_keys.py --models /tmp/old/inline_mm/models

writes ``tests/data/backbone_state_keys.json``: per config (path under ``configs/``) the
number of tensors of its backbone's state dict and a SHA-1 of its sorted ``key shape``
lines, built on the meta device (no weights). ``tests/test_backbone_contract.py`` checks that
every shipped config still builds these: a refactor of the constructors must not move a key.
``--models`` builds the backbones from another copy of ``inline_mm/models`` (e.g.
``git archive <commit> inline_mm/models | tar -x -C /tmp/old``), to record what a commit
before a change built.
"""
import argparse
import hashlib
import importlib
import json
import sys
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / 'tests' / 'data' / 'backbone_state_keys.json'


def shipped_configs():
    """Every recipe config (``configs/**/*.py`` outside ``_base_`` folders and ``custom/``,
    whose configs read their classes from the user's data), sorted."""
    return sorted(p for p in (ROOT / 'configs').rglob('*.py')
                  if '_base_' not in p.parts and 'custom' not in p.parts)


def digest(state: dict) -> dict:
    """``count`` and ``sha1`` of a state dict's sorted ``key shape`` lines."""
    lines = sorted(f'{k} {tuple(v.shape)}' for k, v in state.items())
    return dict(count=len(lines), sha1=hashlib.sha1('\n'.join(lines).encode()).hexdigest())


def backbone_state(config: Path, classes: dict) -> dict:
    """The state dict (meta tensors) of ``config``'s backbone built by ``classes[type]``."""
    from mmengine.config import Config
    args = dict(Config.fromfile(str(config)).model.backbone)
    cls = classes[args.pop('type')]
    args.pop('init_cfg', None)
    with torch.device('meta'):
        return cls(**args).state_dict()


def family_classes(models: Path = None) -> dict:
    """Backbone name -> class, from this checkout or from another copy of the models."""
    from inline_mm.models import FAMILIES
    if models is None:
        return {name: f.cls for name, f in FAMILIES.items()}
    pkg = types.ModuleType('_recorded_models')
    pkg.__path__ = [str(models)]
    sys.modules['_recorded_models'] = pkg
    return {name: getattr(importlib.import_module(
        f'_recorded_models.{f.cls.__module__.rsplit(".", 1)[1]}'), name)
        for name, f in FAMILIES.items()}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--models', type=Path, help='another copy of inline_mm/models')
    p.add_argument('--out', type=Path, default=OUT)
    args = p.parse_args(argv)
    import inline_mm  # noqa: F401  (the configs' custom_imports)
    classes = family_classes(args.models)
    table = {str(c.relative_to(ROOT / 'configs')): digest(backbone_state(c, classes))
             for c in shipped_configs()}
    args.out.write_text(json.dumps(table, indent=1, sort_keys=True) + '\n')
    print(f'{len(table)} configs -> {args.out}')


if __name__ == '__main__':
    main()
