#!/usr/bin/env bash
# Training on a Slurm cluster: one task per GPU, mmengine's slurm launcher (PyTorch DDP).
#
#   [GPUS=16] [GPUS_PER_NODE=8] [CPUS_PER_TASK=5] [SRUN_ARGS="..."] \
#       bash tools/slurm_train.sh PARTITION JOB_NAME CONFIG WORK_DIR [train.py args ...]
#
# GPUS is the total (tasks = GPUS, nodes = GPUS / GPUS_PER_NODE). mmengine reads the rank,
# world size and master address from Slurm's variables; PORT (default 29500) sets the port.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/launch_common.sh"
need_args 4 $# "bash tools/slurm_train.sh PARTITION JOB_NAME CONFIG WORK_DIR [train.py args ...]"
PARTITION=$1
JOB_NAME=$2
CONFIG=$3
WORK_DIR=$4
shift 4
GPUS=${GPUS:-8}
GPUS_PER_NODE=${GPUS_PER_NODE:-$(( GPUS < 8 ? GPUS : 8 ))}
CPUS_PER_TASK=${CPUS_PER_TASK:-5}
export MASTER_PORT=${PORT:-${MASTER_PORT:-29500}}

# shellcheck disable=SC2086  # SRUN_ARGS is a list of flags
srun -p "$PARTITION" --job-name="$JOB_NAME" \
    --gres=gpu:"$GPUS_PER_NODE" --ntasks="$GPUS" --ntasks-per-node="$GPUS_PER_NODE" \
    --cpus-per-task="$CPUS_PER_TASK" --kill-on-bad-exit=1 ${SRUN_ARGS:-} \
    "$PYTHON" -u "$TOOLS/train.py" "$CONFIG" --work-dir="$WORK_DIR" --launcher=slurm "$@"
