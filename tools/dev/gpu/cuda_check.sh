#!/usr/bin/env bash
# Run the CUDA checks on a GPU machine that has Python with torch/torchvision but no network and
# no compiler.  Prepare the wheels first, on a machine with network access:
#     bash tools/dev/gpu/prepare_wheels.sh            # -> .whl/ (~11 MB)
# then, on the GPU machine, from the repository root (with .whl/ beside it):
#     bash tools/dev/gpu/cuda_check.sh                # ~3 min on one H200
# Nothing is installed into the machine's Python: the wheels go to a private folder
# (SITE, default /tmp/inline_mm_site) put first on PYTHONPATH, so its setuptools < 81 and the
# OpenMMLab packages shadow whatever the machine has.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
WHEELS="${WHEELS:-$ROOT/.whl}"
SITE="${SITE:-/tmp/inline_mm_site}"
PY="${PYTHON:-python3}"
ls "$WHEELS"/*.whl >/dev/null 2>&1 || { echo "no wheels in $WHEELS: run tools/dev/gpu/prepare_wheels.sh"; exit 2; }
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" "$WHEELS"/*.whl
export PYTHONPATH="$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
exec "$PY" "$ROOT/tools/dev/gpu/cuda_check.py" "$@"
