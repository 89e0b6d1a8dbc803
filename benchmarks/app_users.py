"""The app under several users at once: per-request latency against one user's, and every
answer against the same request alone.

    python -m benchmarks.app_users                      # 4 users, 8 map requests each
    python -m benchmarks.app_users --users 4 --requests 6 --rounds 2 --model-requests 1

Starts ``python -m inline_mm.app``'s server in this process on 127.0.0.1 (the demo config,
random weights, CPU) and drives it through ``gradio_client`` as browsers would: each user
uploads an image of its own, then asks for the maps of ``--requests`` points, alternating
two blocks (so that every request runs the backbone: no capture is reused). First one user
alone (the reference latency and the reference answers: the weights file of each request),
then ``--users`` users released together by a barrier, ``--rounds`` times. Prints the
median and worst per-request latency of the users together against one user's median, and
the largest difference of any answer's weights (float64) from the same request alone.
``--model-requests``: how many model requests the server runs at once (default: the app's,
``--concurrency``; 1 runs them one at a time).
"""
import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

CONFIG = 'configs/inline_swin/mask-rcnn_inline-swin-nano_fpn_1xb4-550it_toy-coco.py'
BLOCKS = ('stage 0 block 0 (InLine)', 'stage 1 block 0 (InLine)')


def _image(path: Path, seed: int, hw=(180, 240)) -> Path:
    from PIL import Image
    rng = np.random.default_rng(seed)
    h, w = hw
    yy, xx = np.mgrid[:h, :w]
    rgb = np.stack([(xx * 255 // w + 40 * seed) % 256, yy * 255 // h, (xx + 2 * yy) % 256], -1)
    rgb = rgb.astype(np.uint8)
    for _ in range(4):
        y, x = rng.integers(0, h - 40), rng.integers(0, w - 40)
        rgb[y:y + 40, x:x + 40] = rng.integers(0, 256, 3)
    Image.fromarray(rgb).save(path)
    return path


class User:
    """One browser tab: a gradio_client session with its image loaded."""

    def __init__(self, url: str, image: Path, requests: int):
        from gradio_client import Client, handle_file
        self.client = Client(url, verbose=False)
        self.client.predict(handle_file(str(image)), 0.3, api_name='/load')
        rng = np.random.default_rng(len(str(image)) + requests)
        self.queries = [(int(rng.integers(0, 240)), int(rng.integers(0, 180)), BLOCKS[i % 2])
                        for i in range(requests)]

    def run(self):
        """Every query once: ``[(seconds, weights), ...]``."""
        out = []
        for x, y, block in self.queries:
            start = time.perf_counter()
            result = self.client.predict(x, y, block, 'mean over heads', 0.3, api_name='/attend')
            seconds = time.perf_counter() - start
            if not result[4]:
                raise RuntimeError(f'no maps for ({x}, {y}) at {block}: {result[-1]}')
            with np.load(result[4], allow_pickle=False) as f:
                out.append((seconds, {m: f[m] for m in ('inline', 'linear', 'softmax')}))
        return out


def main(argv=None):
    p = argparse.ArgumentParser(prog='python -m benchmarks.app_users', description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--users', type=int, default=4)
    p.add_argument('--requests', type=int, default=8, help='map requests per user')
    p.add_argument('--rounds', type=int, default=3, help='times the users are released')
    p.add_argument('--model-requests', type=int, default=None,
                   help='model requests the server runs at once (default: the app\'s, '
                   '--concurrency)')
    p.add_argument('--port', type=int, default=0, help='(default: a free port)')
    args = p.parse_args(argv)

    import socket

    from inline_mm.app import ui
    from inline_mm.app.viewer import Viewer
    port = args.port
    if not port:
        with socket.socket() as s:
            s.bind(('127.0.0.1', 0))
            port = s.getsockname()[1]
    viewer = Viewer(CONFIG, device='cpu')
    if args.model_requests is None:
        args.model_requests = ui.DEFAULT_CONCURRENCY
    page = ui.serve(viewer, '127.0.0.1', port, block=False, model_requests=args.model_requests)
    url = f'http://127.0.0.1:{port}/'
    try:
        with tempfile.TemporaryDirectory() as tmp:
            users = [User(url, _image(Path(tmp) / f'user{i}.png', i), args.requests)
                     for i in range(args.users)]
            for user in users:          # warm-up (first calls allocate), not timed
                user.client.predict(1, 1, BLOCKS[0], 'mean over heads', 0.3, api_name='/attend')
            alone = [user.run() for user in users]          # one user at a time
            single = [s for answers in alone for s, _ in answers]
            together, worst_diff = [], 0.0
            for _ in range(args.rounds):
                barrier = threading.Barrier(len(users))
                results = [None] * len(users)

                def go(i):
                    barrier.wait()
                    results[i] = users[i].run()
                threads = [threading.Thread(target=go, args=(i,)) for i in range(len(users))]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                for i, answers in enumerate(results):
                    for (s, got), (_, want) in zip(answers, alone[i]):
                        together.append(s)
                        worst_diff = max(worst_diff, max(float(np.abs(got[m] - want[m]).max())
                                                         for m in want))
    finally:
        page.close()
    one = statistics.median(single)
    med, worst = statistics.median(together), max(together)
    print(f'{args.users} users x {args.requests} map requests x {args.rounds} rounds, '
          f'model requests at once: {args.model_requests} (nano detector, CPU)')
    print(f'one user alone: median {one:.3f} s, worst {max(single):.3f} s '
          f'({len(single)} requests)')
    print(f'{args.users} users together: median {med:.3f} s ({med / one:.2f}x one user\'s '
          f'median), worst {worst:.3f} s ({worst / one:.2f}x) ({len(together)} requests)')
    print(f'largest difference of an answer from the same request alone: {worst_diff:.3g}')


if __name__ == '__main__':
    main()
