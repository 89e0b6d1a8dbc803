"""What the tests share that is not a fixture, importable without side effects: by
conftest.py, by the tests, and by reliability_support.py inside training subprocesses
(where importing conftest would set the test process up)."""
import os
import socket
from pathlib import Path
from typing import Dict

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / 'tests'


def subprocess_env(**extra: str) -> Dict[str, str]:
    """The environment of a tool started by a test: one thread per process (the 2 cores are
    shared by parallel workers), unbuffered logs, this checkout first on PYTHONPATH."""
    env = dict(os.environ, OMP_NUM_THREADS='1', MKL_NUM_THREADS='1', PYTHONUNBUFFERED='1')
    env['PYTHONPATH'] = os.pathsep.join([str(ROOT), env.get('PYTHONPATH', '')]).rstrip(os.pathsep)
    env.update(extra)
    return env


def free_port() -> int:
    """A TCP port nothing listens on now (tests running in parallel need their own)."""
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]
