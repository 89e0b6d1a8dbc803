#!/usr/bin/env bash
# Distributed training with torchrun (PyTorch DDP through mmengine's launcher).
#
#   bash tools/dist_train.sh CONFIG GPUS [train.py args ...]
#
# Multi-node: run the same command on every node with
#   NNODES=2 NODE_RANK=<0|1> MASTER_ADDR=<node 0 address> PORT=29500 bash tools/dist_train.sh ...
# Any other torchrun flag goes in TORCHRUN_ARGS, e.g. TORCHRUN_ARGS="--rdzv-backend=c10d".
# On a machine without CUDA the processes train on CPU over gloo (inline_mm.engine.distributed).
set -euo pipefail
if [ $# -lt 2 ]; then
    echo "usage: bash tools/dist_train.sh CONFIG NUM_PROCESSES_PER_NODE [train.py args ...]" >&2
    exit 2
fi
CONFIG=$1
GPUS=$2
shift 2
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
PORT=${PORT:-29500}
MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# The project's environment when there is one (make / tools/dev/setup_env.sh), else python on PATH.
if [ -z "${PYTHON:-}" ]; then
    if [ -x "$HERE/../.venv/bin/python" ]; then PYTHON="$HERE/../.venv/bin/python"; else PYTHON=python; fi
fi

# shellcheck disable=SC2086  # TORCHRUN_ARGS is a list of flags
exec "$PYTHON" -m torch.distributed.run \
    --nnodes="$NNODES" --node_rank="$NODE_RANK" --master_addr="$MASTER_ADDR" \
    --master_port="$PORT" --nproc_per_node="$GPUS" ${TORCHRUN_ARGS:-} \
    "$HERE/train.py" "$CONFIG" --launcher pytorch "$@"
