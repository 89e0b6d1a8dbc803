"""Convert an official InLine ImageNet checkpoint into a tensors-only file, once.

    inline-mm-convert-checkpoint inline://swin_t checkpoints/inline_swin_t.safetensors

SRC is a file, a URL or an official file's short name (``python -m inline_mm.cli.weights
list``), resolved as ``init_cfg`` resolves it: downloaded once into the weights cache.

The official files pickle the training config (a yacs object) beside the weights.
inline_mm reads that one object inertly; any other pickled object is refused unless
you pass --allow-pickle for a file you trust.  The output holds tensors only, in the
backbone's own key layout, and loads fast through init_cfg=dict(type='Pretrained').
"""
import argparse
import sys

from inline_mm.models.checkpoint import (CheckpointError, extract_state_dict, read_checkpoint,
                                         save_converted)
from inline_mm.models.families import convert_official
from inline_mm.models.weights import resolve


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('src', help="official checkpoint (.pth) or any accepted checkpoint: a path, "
                               "a URL or a short name such as inline://swin_t")
    p.add_argument('dst', help='output file: .safetensors (recommended) or .pth')
    p.add_argument('--allow-pickle', action='store_true',
                   help='fully unpickle SRC (only for files you trust)')
    p.add_argument('--checkpoint-key', default=None,
                   help="entry to take the weights from, e.g. 'state_dict_ema' (default: "
                        "'state_dict', else 'model')")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    try:
        ckpt = read_checkpoint(resolve(args.src), allow_pickle=args.allow_pickle)
        family, state = convert_official(extract_state_dict(ckpt, args.checkpoint_key))
    except (CheckpointError, FileNotFoundError, ValueError) as e:
        sys.exit(f'error: {e}')
    save_converted(state, args.dst, metadata={'backbone': family, 'source': args.src})
    n = sum(v.numel() for v in state.values())
    print(f'{family}: wrote {len(state)} tensors ({n:,} values) to {args.dst}')


if __name__ == '__main__':
    main()
