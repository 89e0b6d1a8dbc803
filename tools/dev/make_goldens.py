#!/usr/bin/env python
"""Regenerate (or verify) the golden data of tests/data/golden from the official InLine code.

The goldens are small models with the exact structure of the released variants
(narrower, shallower), weights drawn at random with a large spread so that every path
matters, saved in the official checkpoint layout (``{'model': state_dict}``, tensors
only), together with what the official model computes from them: the tokens leaving
the last block of every stage (``stage{i}``; every block, ``block{i}``, for InLine-DeiT),
the final norm where the model has one, and the logits. ``tests/test_goldens.py`` (over
``cases.json``) holds inline_mm's backbones to these outputs (max relative error 1e-5 in fp32).

This is a developer tool, not a CI step: it needs the authors' code, which is not a
dependency of inline_mm.

1. Get the official code (Han et al., "Bridging the Divide: Reconsidering Softmax and
   Linear Attention", NeurIPS 2024)::

       git clone https://github.com/LeapLabTHU/InLine /path/to/InLine

   Its model files need timm (any 0.9+ works through timm's compatibility modules)
   and, for InLine-CSwin, einops (``pip install einops``).
2. Check that this script still reproduces the stored goldens with that code::

       python tools/dev/make_goldens.py --official /path/to/InLine --verify

   (reads tests/data/golden/<case>.pth and the stored input, recomputes every tap, and
   prints the largest relative difference per case; expect ~1e-7, exit status 1 above
   1e-5).
3. Regenerate (new random weights and inputs; then re-run the test suite)::

       python tools/dev/make_goldens.py --official /path/to/InLine [--cases NAME ...]

The cases, with the official architecture arguments of each, are listed in
``cases.json`` of the golden folder (``--cases-file`` to use another). A case whose
``weights`` (or ``checkpoint``) names another case's file reuses those weights at
another input size: InLine-Swin at 448 is built with a window covering the whole map
(global InLine stages; stages 0-2 are tapped), InLine-PVT runs the 224 model at any
size (position tables resized by the official code), InLine-DeiT is built at the new
size and loads the weights through the official ``checkpoint_filter_fn`` (position
table resized, class token kept).
"""
import argparse
import importlib.util
import json
import sys
from functools import partial
from pathlib import Path

import torch
import torch.nn as nn

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / 'tests' / 'data' / 'golden'
FAMILY_FILES = {'inline_swin': 'inline_swin.py', 'inline_pvt': 'inline_pvt.py',
                'inline_cswin': 'inline_cswin.py', 'inline_deit': 'inline_deit.py'}


def official_module(repo: Path, family: str):
    """Load one official model file by path (not the official ``models`` package, whose
    ``__init__`` imports every family)."""
    path = repo / 'models' / FAMILY_FILES[family]
    if not path.is_file():
        raise SystemExit(f'error: {path} not found: --official must be a checkout of '
                         'LeapLabTHU/InLine')
    name = f'official_{family}'
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module            # timm's register_model looks the module up
        spec.loader.exec_module(module)
    return sys.modules[name]


def family_of(case: str) -> str:
    return next(f for f in FAMILY_FILES if case.startswith(f + '_'))


# ----------------------------------------------------------------------------- models
def build(module, family: str, arch: dict, hw):
    """The official model for ``arch`` (official argument names) at input size ``hw``."""
    a = dict(arch)
    if family == 'inline_swin':
        img = hw[0]
        # At another size than 224, the InLine window grows with the map so that InLine
        # stages stay global (as at 224, where window 56 covers every InLine stage).
        window = a['window_size'] * img // 224
        return module.InLineSwin(img_size=img, patch_size=4, num_classes=a['num_classes'],
                                 embed_dim=a['embed_dim'], depths=a['depths'],
                                 num_heads=a['num_heads'], window_size=window,
                                 attn_type=a['attn_type'])
    if family == 'inline_pvt':
        # Built at 224 (the stored position grids); other sizes resize them per forward.
        return module.PyramidVisionTransformer(
            img_size=224, patch_size=a['patch_size'], num_classes=a['num_classes'],
            embed_dims=a['embed_dims'], num_heads=a['num_heads'], mlp_ratios=a['mlp_ratios'],
            qkv_bias=a['qkv_bias'], norm_layer=partial(nn.LayerNorm, eps=a['norm_eps']),
            depths=a['depths'], sr_ratios=a['sr_ratios'], la_sr_ratios=a['la_sr_ratios'],
            attn_type=a['attn_type'])
    if family == 'inline_cswin':
        return module.CSWinTransformer(
            img_size=hw[0], patch_size=a['patch_size'], num_classes=a['num_classes'],
            embed_dim=a['embed_dim'], depth=a['depth'], split_size=a['split_size'],
            la_split_size=a['la_split_size'], num_heads=a['num_heads'],
            mlp_ratio=a['mlp_ratio'], attn_type=a['attn_type'])
    return module.VisionTransformer(img_size=hw[0], patch_size=a['patch_size'],
                                    num_classes=a['num_classes'], embed_dim=a['embed_dim'],
                                    depth=a['depth'], num_heads=a['num_heads'])


def tapped_blocks(model, family: str) -> dict:
    """tap name -> the official block whose output it is."""
    if family == 'inline_swin':
        return {f'stage{i}': layer.blocks[-1] for i, layer in enumerate(model.layers)}
    if family == 'inline_pvt':
        return {f'stage{i}': getattr(model, f'block{i + 1}')[-1] for i in range(4)}
    if family == 'inline_cswin':
        return {f'stage{i}': getattr(model, f'stage{i + 1}')[-1] for i in range(4)}
    return {f'block{i}': block for i, block in enumerate(model.blocks)}


@torch.no_grad()
def run(model, family: str, x: torch.Tensor, taps, logits: bool = True) -> dict:
    """``input``, the requested taps (``final_norm``: the model's final norm of the last
    block's output) and, with ``logits``, the classifier output."""
    got = {}
    hooks = [block.register_forward_hook(lambda m, i, o, k=k: got.__setitem__(k, o.clone()))
             for k, block in tapped_blocks(model, family).items()]
    out_logits = model.eval()(x)
    for h in hooks:
        h.remove()
    out = {'input': x}
    out.update({k: got[k] for k in taps if k in got})
    if 'final_norm' in taps:
        out['final_norm'] = model.norm(got[list(tapped_blocks(model, family))[-1]])
    if logits:
        out['logits'] = out_logits
    return out


def case_taps(case: dict, family: str) -> list:
    """The taps of a case: its ``taps`` (``block{i}`` expanded over the depth); InLine-DeiT
    cases without a list tap every block and the final norm."""
    depth = case['architecture'].get('depth', 0)
    taps = list(case.get('taps', {})) or (
        ['block{i}', 'final_norm'] if family == 'inline_deit' else [])
    expanded = []
    for tap in taps:
        expanded += [tap.format(i=i) for i in range(depth)] if '{i}' in tap else [tap]
    return expanded


def stir(model: nn.Module, generator: torch.Generator):
    """Random weights with a large spread: LayerNorm gains 1 + N(0, 0.1), every other
    parameter N(0, 0.15); buffers (index tables) stay as built."""
    norm_gains = {id(m.weight) for m in model.modules()
                  if isinstance(m, nn.LayerNorm) and m.weight is not None}
    with torch.no_grad():
        for p in model.parameters():
            noise = torch.randn(p.shape, generator=generator)
            p.copy_(1 + 0.1 * noise if id(p) in norm_gains else 0.15 * noise)


def load_weights(model, family: str, module, state: dict):
    """Load another case's official-format weights into ``model`` built at its size."""
    if family == 'inline_deit':
        state = module.checkpoint_filter_fn(state, model)
    own = model.state_dict()
    skipped = [k for k, v in state.items() if k in own and own[k].shape != v.shape]
    # Only what the taps do not reach may differ: InLine-Swin's last (softmax) stage has
    # another window (relative position table) at another size.
    assert all(k.startswith('layers.3.') for k in skipped), skipped
    missing, unexpected = model.load_state_dict(
        {k: v for k, v in state.items() if k not in skipped}, strict=False)
    assert not unexpected and all(k.startswith('layers.3.') or k.endswith('attn_mask')
                                  for k in missing), (missing, unexpected)


# ----------------------------------------------------------------------------- driver
def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).abs().max() / b.float().abs().max()).item()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog='See the module docstring for the steps.')
    p.add_argument('--official', type=Path, required=True,
                   help='checkout of github.com/LeapLabTHU/InLine')
    p.add_argument('--out', type=Path, default=GOLDEN,
                   help='golden folder (default: tests/data/golden)')
    p.add_argument('--cases-file', type=Path, default=None,
                   help='cases.json to read (default: the one in --out)')
    p.add_argument('--cases', nargs='+', default=None, help='only these cases')
    p.add_argument('--verify', action='store_true',
                   help='recompute the stored goldens and compare instead of writing')
    p.add_argument('--seed', type=int, default=0)
    args = p.parse_args(argv)
    cases = json.loads((args.cases_file or args.out / 'cases.json').read_text())
    names = args.cases or list(cases)
    # Cases that own their weights first, so that the others can reuse them.
    names.sort(key=lambda n: bool(cases[n].get('weights') or
                                  cases[n].get('checkpoint', f'{n}.pth') != f'{n}.pth'))
    generator = torch.Generator().manual_seed(args.seed)
    worst_overall = 0.
    for name in names:
        case, family = cases[name], family_of(name)
        module = official_module(args.official, family)
        weights = Path(case.get('weights') or case.get('checkpoint') or f'{name}.pth').stem
        shape = case['input_shape']
        model = build(module, family, case['architecture'], shape[2:])
        taps = case_taps(case, family)
        if args.verify or weights != name:
            state = torch.load(args.out / f'{weights}.pth', weights_only=True)['model']
            load_weights(model, family, module, state)
        else:
            stir(model, generator)
            torch.save({'model': model.state_dict()}, args.out / f'{name}.pth')
        if args.verify:
            stored = torch.load(args.out / f'{name}_expected.pth', weights_only=True)
            result = run(model, family, stored['input'], taps)
            errs = {k: rel_err(result[k], stored[k]) for k in stored if k in result and
                    k not in ('input', 'logits')}
            worst = max(errs.values())
            worst_overall = max(worst_overall, worst)
            print(f'{name}: {len(errs)} taps, max rel. error {worst:.1e}')
            continue
        x = torch.randn(shape, generator=generator)
        # Logits only where every weight is the case's own (not a resized model's).
        result = run(model, family, x, taps, logits=weights == name)
        torch.save(result, args.out / f'{name}_expected.pth')
        print(f'{name}: wrote {name}_expected.pth ({", ".join(result)})')
    if args.verify and not worst_overall <= 1e-5:
        print(f'FAILED: the official code and the stored goldens differ ({worst_overall:.1e})')
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
