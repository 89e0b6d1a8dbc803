#!/usr/bin/env bash
# One set-up path for users, developers and CI: creates .venv at the repository root and installs
# torch, mmengine, mmcv (compiled ops, built once per machine and cached), mmdet, mmseg, timm and
# inline_mm itself in editable mode.  Idempotent: a second run only checks and returns.
#
# Knobs (environment variables):
#   PYTHON            interpreter used to create .venv              (default: python3.11, else python3)
#   TORCH_SPEC        pip requirement(s) for torch when .venv has none
#                     (default: "torch==2.14.1 torchvision==0.29.1", served from this machine's disk)
#   MMCV_WITH_CUDA    1 = build mmcv's CUDA ops, 0 = CPU ops only, unset = auto (CUDA torch + nvcc
#                     + a visible GPU)
#   INLINE_MM_CACHE   where built mmcv wheels are kept   (default: ${XDG_CACHE_HOME:-~/.cache}/inline_mm)
#   MAX_JOBS          parallel compile jobs for the mmcv build (default: number of cores)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
STAMP="$VENV/.inline_mm_setup_done"
MMCV_VERSION=2.1.0
CACHE="${INLINE_MM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/inline_mm}"

log() { printf '[setup %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

# The stamp records the inputs of the last successful set-up; same inputs -> nothing to do.
fingerprint() {
    cat "$ROOT/setup.cfg" "$ROOT/tools/setup_env.sh" 2>/dev/null | sha256sum | cut -d' ' -f1
}
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$(fingerprint)" ]]; then
    exit 0
fi

if [[ -z "${PYTHON:-}" ]]; then
    if command -v python3.11 >/dev/null; then PYTHON=python3.11; else PYTHON=python3; fi
fi
if [[ ! -x "$VENV/bin/python" ]]; then
    if "$PYTHON" -c "import torch" 2>/dev/null; then
        # Reuse the interpreter's torch (e.g. a CUDA build the user installed) instead of
        # pulling a second multi-GB copy into the venv.
        log "creating $VENV on $($PYTHON --version 2>&1), reusing its torch" \
            "$("$PYTHON" -c 'import torch; print(torch.__version__)')"
        "$PYTHON" -m venv --system-site-packages "$VENV"
    else
        log "creating $VENV with $($PYTHON --version 2>&1)"
        "$PYTHON" -m venv "$VENV"
    fi
fi
PY="$VENV/bin/python"
PIP=("$PY" -m pip install --progress-bar off)

# --- torch: keep whatever the venv already has; otherwise install the pinned spec -----------------
if "$PY" -c "import torch" 2>/dev/null; then
    log "torch already present: $("$PY" -c 'import torch; print(torch.__version__)')"
else
    TORCH_SPEC="${TORCH_SPEC:-torch==2.14.1 torchvision==0.29.1}"
    log "installing $TORCH_SPEC"
    # shellcheck disable=SC2086
    "${PIP[@]}" $TORCH_SPEC
fi
# Every later install is constrained to the torch we have, so no dependency can pull a second,
# multi-GB torch behind the user's back.
CONSTRAINTS="$VENV/torch-constraints.txt"
"$PY" - >"$CONSTRAINTS" <<'EOF'
import importlib.metadata as md
for name in ("torch", "torchvision"):
    try:
        print(f"{name}=={md.version(name)}")
    except md.PackageNotFoundError:
        pass
EOF
PIP+=(-c "$CONSTRAINTS")

"${PIP[@]}" wheel ninja "mmengine==0.10.7"

# --- mmcv with compiled ops, built once per (mmcv, torch, CUDA, Python) and cached -----------------
read -r TORCH_VER TORCH_CUDA PY_TAG HAVE_GPU < <("$PY" - <<'EOF'
import sys, torch
print(torch.__version__.split("+")[0], torch.version.cuda or "none",
      f"py{sys.version_info.major}{sys.version_info.minor}", int(torch.cuda.is_available()))
EOF
)
if [[ -z "${MMCV_WITH_CUDA:-}" ]]; then
    # Auto: CUDA ops only where they can run.  A CUDA torch on a machine without a GPU (the default
    # torch served here) gets CPU ops; the CUDA build takes ~40 min on 2 cores and could not be used.
    if [[ "$TORCH_CUDA" != none && "$HAVE_GPU" == 1 ]] && command -v nvcc >/dev/null; then
        MMCV_WITH_CUDA=1
    else
        MMCV_WITH_CUDA=0
    fi
fi
if [[ "$MMCV_WITH_CUDA" == 1 ]]; then FLAVOUR="cu${TORCH_CUDA}"; else FLAVOUR=cpu; fi
WHEEL_DIR="$CACHE/wheels/mmcv-$MMCV_VERSION-torch$TORCH_VER-$FLAVOUR-$PY_TAG"

mmcv_ok() { "$PY" -c "import mmcv, mmcv.ops; assert mmcv.__version__ == '$MMCV_VERSION'" 2>/dev/null; }

if mmcv_ok; then
    log "mmcv $MMCV_VERSION with compiled ops already installed"
else
    if ! ls "$WHEEL_DIR"/mmcv-*.whl >/dev/null 2>&1; then
        BUILD="$(mktemp -d)"
        trap 'rm -rf "$BUILD"' EXIT
        log "building mmcv $MMCV_VERSION from source ($FLAVOUR ops) - once per machine; ~15 min on 2 cores"
        # mmcv 2.1.0's setup.py needs the pkg_resources of setuptools < 70 (restored below).
        "${PIP[@]}" "setuptools<70"
        "$PY" -m pip download --no-deps --no-binary :all: -d "$BUILD" "mmcv==$MMCV_VERSION" >/dev/null
        tar -xzf "$BUILD"/mmcv-$MMCV_VERSION.tar.gz -C "$BUILD"
        SRC="$BUILD/mmcv-$MMCV_VERSION"
        # torch >= 2.10 headers need C++20; mmcv 2.1.0 hard-codes -std=c++17.
        sed -i 's/-std=c++17/-std=c++20/g' "$SRC/setup.py"
        export MAX_JOBS="${MAX_JOBS:-$(nproc)}" MMCV_WITH_OPS=1
        if [[ "$MMCV_WITH_CUDA" == 1 ]]; then
            export FORCE_CUDA=1
            # torch guesses CUDA_HOME from `which nvcc`, which may be a wrapper outside the toolkit.
            export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
            if [[ -z "${TORCH_CUDA_ARCH_LIST:-}" ]]; then
                TORCH_CUDA_ARCH_LIST="$("$PY" -c 'import torch; print(";".join(sorted({"%d.%d" % torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())})))')"
                export TORCH_CUDA_ARCH_LIST
            fi
            # Some toolkits lack headers (cusparse) that torch's headers include; pip's CUDA
            # wheels carry them. The toolkit's own include dir stays first.
            NV_INC="$(ls -d "$VENV"/lib/python*/site-packages/nvidia/*/include 2>/dev/null | paste -sd: -)"
            export CPATH="$CUDA_HOME/include${NV_INC:+:$NV_INC}${CPATH:+:$CPATH}"
            log "CUDA_HOME=$CUDA_HOME TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST"
        else
            export FORCE_CUDA=0 MMCV_WITH_CUDA=0 CUDA_HOME=/nonexistent-no-cuda-build
        fi
        start=$SECONDS
        ( "$PY" -m pip wheel --no-build-isolation --no-deps -w "$BUILD/dist" "$SRC" >"$BUILD/build.log" 2>&1 ) &
        pid=$!
        while kill -0 "$pid" 2>/dev/null; do
            sleep 30
            kill -0 "$pid" 2>/dev/null && log "still building mmcv ... $(( SECONDS - start ))s elapsed"
        done
        if ! wait "$pid"; then
            tail -n 40 "$BUILD/build.log"
            log "mmcv build FAILED (full log above was $BUILD/build.log); see README 'Troubleshooting'"
            exit 1
        fi
        mkdir -p "$WHEEL_DIR"
        cp "$BUILD"/dist/mmcv-*.whl "$WHEEL_DIR/"
        log "mmcv built in $(( SECONDS - start ))s; cached in $WHEEL_DIR"
    else
        log "reusing cached mmcv wheel from $WHEEL_DIR"
    fi
    "${PIP[@]}" --no-deps --force-reinstall "$WHEEL_DIR"/mmcv-*.whl
    # mmcv's own runtime dependencies (without letting it touch torch).
    "${PIP[@]}" addict packaging Pillow pyyaml yapf opencv-python
    mmcv_ok || { log "mmcv installed but 'import mmcv.ops' fails"; exit 1; }
fi

# --- the rest, and inline_mm in editable mode ------------------------------------------------------
log "installing mmdet, mmsegmentation, timm and inline_mm (editable)"
# setuptools: torch >= 2.10 asks for >= 77; mmengine still imports pkg_resources (gone in 81).
"${PIP[@]}" "setuptools<81"
"${PIP[@]}" -e "$ROOT[dev]"

"$PY" -c "import inline_mm, mmcv.ops, mmdet, mmseg, timm" >/dev/null
fingerprint >"$STAMP"
log "done: $VENV"
