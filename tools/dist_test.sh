#!/usr/bin/env bash
# Distributed testing with torchrun (PyTorch DDP through mmengine's launcher).
#
#   bash tools/dist_test.sh CONFIG CHECKPOINT GPUS [test.py args ...]
#
# Multi-node: run the same command on every node with
#   NNODES=2 NODE_RANK=<0|1> MASTER_ADDR=<node 0 address> PORT=29500 bash tools/dist_test.sh ...
# Any other torchrun flag goes in TORCHRUN_ARGS, e.g. TORCHRUN_ARGS="--rdzv-backend=c10d".
# On a machine without CUDA the processes test on CPU over gloo (inline_mm.patches.distributed).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/launch_common.sh"
need_args 3 $# "bash tools/dist_test.sh CONFIG CHECKPOINT NUM_PROCESSES_PER_NODE [test.py args ...]"
# CONFIG=$1, CHECKPOINT=$2, GPUS=$3
torchrun_tool test.py "$3" "$1" "$2" --launcher pytorch "${@:4}"
