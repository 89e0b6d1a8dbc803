# Sourced by tools/dist_train.sh, tools/dist_test.sh and tools/slurm_train.sh (not run by
# itself): the Python to launch with, the argument check, and the torchrun call they share.
TOOLS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# The project's environment when there is one (make / tools/dev/setup_env.sh), else python on PATH.
if [ -z "${PYTHON:-}" ]; then
    if [ -x "$TOOLS/../.venv/bin/python" ]; then PYTHON="$TOOLS/../.venv/bin/python"; else PYTHON=python; fi
fi

# need_args N GIVEN USAGE: stop with the usage line unless GIVEN >= N arguments came.
need_args() {
    if [ "$2" -lt "$1" ]; then
        echo "usage: $3" >&2
        exit 2
    fi
}

# torchrun_tool SCRIPT NPROC [ARGS ...]: tools/SCRIPT with ARGS in NPROC processes on this
# node, under torchrun; NNODES, NODE_RANK, MASTER_ADDR, PORT and TORCHRUN_ARGS from the
# environment (defaults: one node, 127.0.0.1:29500).
torchrun_tool() {
    local script=$1 nproc=$2
    shift 2
    # shellcheck disable=SC2086  # TORCHRUN_ARGS is a list of flags
    exec "$PYTHON" -m torch.distributed.run \
        --nnodes="${NNODES:-1}" --node_rank="${NODE_RANK:-0}" \
        --master_addr="${MASTER_ADDR:-127.0.0.1}" --master_port="${PORT:-29500}" \
        --nproc_per_node="$nproc" ${TORCHRUN_ARGS:-} "$TOOLS/$script" "$@"
}
