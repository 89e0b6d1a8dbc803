"""``python -m inline_mm.app CONFIG [CHECKPOINT]``: start the app (see :mod:`inline_mm.app`)."""
import argparse
import os
import socket
import sys
import warnings

from .viewer import DEFAULT_CONCURRENCY, DEFAULT_MAX_SIDE, DEFAULT_SCORE_THR, PRECISIONS


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog='python -m inline_mm.app',
        description='A local web app: the predictions of an mmdet / mmseg config with an InLine '
                    'backbone, and the exact InLine attention of any point you click.')
    p.add_argument('config', help='an mmdet or mmseg config with an InLine backbone')
    p.add_argument('checkpoint', nargs='?', default=None,
                   help='a trained checkpoint of that config, or backbone weights (an official '
                   'ImageNet file, a converted file, inline://NAME: the rest stays random); '
                   'none: random weights, and the page says so')
    p.add_argument('--host', default='127.0.0.1',
                   help='address to serve on (default: 127.0.0.1, this machine only)')
    p.add_argument('--port', type=int, default=7860, help='(default: 7860)')
    p.add_argument('--device', default=None, help='cpu, cuda, ... (default: cuda if available)')
    p.add_argument('--precision', default='fp32', choices=list(PRECISIONS),
                   help='what the predictions run in: fp32, or bf16 / fp16 autocast (fp16 on '
                   'CUDA only; bf16 where the device has bf16 units); the attention maps stay '
                   'fp32 (default: fp32)')
    p.add_argument('--seed', type=int, default=0, help='seed of random weights (default: 0)')
    p.add_argument('--score-thr', type=float, default=DEFAULT_SCORE_THR,
                   help=f"the score slider's start (default: {DEFAULT_SCORE_THR})")
    p.add_argument('--concurrency', type=int, default=DEFAULT_CONCURRENCY,
                   help='model requests (predictions, maps) run at once over all users; the '
                   f'rest wait in one queue (default: {DEFAULT_CONCURRENCY})')
    p.add_argument('--max-side', type=int, default=DEFAULT_MAX_SIDE,
                   help='larger images are downscaled to this many pixels on their longer side '
                   f'(default: {DEFAULT_MAX_SIDE})')
    return p.parse_args(argv)


def _port_taken(host: str, port: int) -> bool:
    """Whether something already listens on ``host:port`` (or it cannot be bound)."""
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def _quiet():
    """Warnings that are not the user's to act on, off: the OpenMMLab stack's use of
    setuptools' ``pkg_resources``, and asyncio's notes on the event loops gradio's server
    threads leave to the garbage collector."""
    warnings.filterwarnings('ignore', message='pkg_resources is deprecated', category=UserWarning)
    warnings.filterwarnings('ignore', message=r'Deprecated call to `pkg_resources',
                            category=DeprecationWarning)
    warnings.filterwarnings('ignore', message='unclosed event loop', category=ResourceWarning)


def main(argv=None):
    args = parse_args(argv)
    fail = lambda message: sys.exit(f'inline_mm.app: error: {message}')  # noqa: E731
    # What can be checked in a moment is, before gradio and the model load (seconds).
    if not os.path.isfile(args.config):
        fail(f'config not found: {args.config!r}')
    if _port_taken(args.host, args.port):
        fail(f'port {args.port} on {args.host} is in use (another app, or this one running '
             'already?): start with --port N for another port')
    if args.concurrency < 1:
        fail(f'--concurrency {args.concurrency}: give 1 or more')
    _quiet()
    # Nothing leaves this machine: gradio's statistics and version check off before it loads.
    os.environ['GRADIO_ANALYTICS_ENABLED'] = 'False'
    os.environ.setdefault('HF_HUB_OFFLINE', '1')
    try:
        from .ui import serve
    except ModuleNotFoundError as e:
        if (e.name or '').split('.')[0] != 'gradio':
            raise
        fail('the app needs Gradio: pip install "inline_mm[app]" (make setup installs it)')
    from ..models.checkpoint import CheckpointError
    from .viewer import Viewer
    try:
        viewer = Viewer(args.config, args.checkpoint, device=args.device, seed=args.seed,
                        max_side=args.max_side, precision=args.precision)
    except (FileNotFoundError, ValueError, CheckpointError) as e:
        fail(e)
    line = (f'{os.path.basename(args.config)}: {viewer.model_line()}; {viewer.weights_line}')
    try:
        serve(viewer, args.host, args.port, args.score_thr, model_requests=args.concurrency,
              on_start=lambda url: print(f'inline_mm.app: {line}; open {url}', flush=True))
    except OSError as e:         # the port, taken while the model loaded
        if str(args.port) not in str(e):
            raise
        fail(f'port {args.port} on {args.host} is in use: start with --port N for another port')


if __name__ == '__main__':
    main()
