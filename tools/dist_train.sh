#!/usr/bin/env bash
# Distributed training with torchrun (PyTorch DDP through mmengine's launcher).
#
#   bash tools/dist_train.sh CONFIG GPUS [train.py args ...]
#
# Multi-node: run the same command on every node with
#   NNODES=2 NODE_RANK=<0|1> MASTER_ADDR=<node 0 address> PORT=29500 bash tools/dist_train.sh ...
# Any other torchrun flag goes in TORCHRUN_ARGS, e.g. TORCHRUN_ARGS="--rdzv-backend=c10d".
# On a machine without CUDA the processes train on CPU over gloo (inline_mm.patches.distributed).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/launch_common.sh"
need_args 2 $# "bash tools/dist_train.sh CONFIG NUM_PROCESSES_PER_NODE [train.py args ...]"
# CONFIG=$1, GPUS=$2
torchrun_tool train.py "$2" "$1" --launcher pytorch "${@:3}"
