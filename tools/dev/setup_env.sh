#!/usr/bin/env bash
# One set-up path for users, developers and CI: creates .venv at the repository root with torch,
# mmengine, mmcv, mmdet, mmsegmentation, timm, the stock tools' extras (seaborn, psutil, openmim),
# the app's Gradio and inline_mm itself (editable).  Idempotent, and it cannot half-succeed: it
# ends with a self-check and writes its stamp only when that passes, so running it again repairs
# a failed or interrupted set-up.
#
# mmcv, chosen by INLINE_MM_MMCV:
#   lite  (default) mmcv-lite 2.1.0, pure Python, nothing to compile.  The few compiled ops the
#                   shipped configs call (nms, RoIAlign) come from torchvision through
#                   inline_mm/patches/mmcv_ext.py, wired in by the import hook _inline_mm_mmcv_hook.py.
#   full            mmcv 2.1.0 built from source with its C++ ops (and CUDA ops where a CUDA torch,
#                   nvcc and a GPU are present, or MMCV_WITH_CUDA=1); ~15 min on 2 cores, the wheel
#                   cached per machine.  Every mmcv op works; the fallback stays unused.
#   An environment that already has a compiled mmcv keeps it (whatever INLINE_MM_MMCV says).
#
# The OpenMMLab stack, chosen by INLINE_MM_STACK (docs/get_started.md, "The onedl stack"):
#   upstream (default) mmengine 0.10.7, mmdet 3.3.0, mmsegmentation 1.2.2, mmcv-lite 2.1.0; in .venv
#   onedl              the maintained VBTI forks (same import names): onedl-mmengine 0.10.12,
#                      onedl-mmdetection 3.5.1, onedl-mmsegmentation 1.4.2 and onedl-mmcv 2.3.6
#                      built without its ops (MMCV_WITH_OPS=0: pure Python, seconds); in .venv-onedl.
#                      mmcv-lite is not used there: it depends on `mmengine`, which would put
#                      upstream mmengine's files over onedl-mmengine's.
#
# The installer, chosen by INLINE_MM_INSTALLER:
#   auto  (default) uv where it can be had: a `uv` on PATH, else `pip install uv` into the new
#                   environment; pip when neither works, and for an environment that reuses the
#                   interpreter's torch (uv does not see it); the log says which.  uv installs the same
#                   packages, pins and constraints ~4x faster; it is given the indexes,
#                   find-links and constraint files pip is configured with (read from pip's
#                   configuration and PIP_* by tools/dev/uv_index_args.py).  pip stays in the
#                   environment either way (`python -m pip` works there).
#   uv / pip        that one (uv: fail if it cannot be had).
#
# Other knobs (environment variables):
#   PYTHON            interpreter used to create .venv         (default: python3.11, else python3)
#   TORCH_SPEC        pip requirement(s) for torch when .venv has none
#                     (default: "torch==2.14.1 torchvision==0.29.1", served from this machine's disk)
#   VENV              where to create the environment           (default: <repo>/.venv)
#   INLINE_MM_CACHE   where built mmcv wheels are kept (full)   (default: ${XDG_CACHE_HOME:-~/.cache}/inline_mm)
#   MMCV_WITH_CUDA    full build: 1 = CUDA ops, 0 = CPU ops only, unset = auto
#   MAX_JOBS          full build: parallel compile jobs          (default: number of cores)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
STACK="${INLINE_MM_STACK:-upstream}"
case "$STACK" in
    upstream) DEFAULT_VENV="$ROOT/.venv" ;;
    onedl) DEFAULT_VENV="$ROOT/.venv-onedl" ;;
    *) printf '[setup] FAILED: INLINE_MM_STACK=%s: expected upstream (default) or onedl\n' "$STACK"; exit 1 ;;
esac
VENV="${VENV:-$DEFAULT_VENV}"
STAMP="$VENV/.inline_mm_setup_done"
MMCV_VERSION=2.1.0
ONEDL_MMCV_VERSION=2.3.6
ONEDL_MMENGINE_VERSION=0.10.12
MMCV_CHOICE="${INLINE_MM_MMCV:-lite}"
CACHE="${INLINE_MM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/inline_mm}"
# torch >= 2.10 asks for setuptools >= 77.0.3; mmengine 0.10.7 imports pkg_resources (gone in 81).
SETUPTOOLS_RANGE='setuptools>=77.0.3,<81'

log() { printf '[setup %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { log "FAILED: $*"; exit 1; }

case "$MMCV_CHOICE" in lite|full) ;; *) die "INLINE_MM_MMCV=$MMCV_CHOICE: expected 'lite' or 'full'";; esac
if [[ "$STACK" == onedl && "$MMCV_CHOICE" == full ]]; then
    die "INLINE_MM_MMCV=full with INLINE_MM_STACK=onedl is not automated (compiling onedl-mmcv" \
        "was not verified here): set up with INLINE_MM_STACK=onedl make setup, then build the" \
        "ops by hand as docs/get_started.md ('The onedl stack', compiled mmcv) shows"
fi

# The stamp records the inputs of the last *verified* set-up (the version among them: its
# metadata is written by the install) and its mmcv ("lite" or "full");
# same inputs -> nothing to do.  A full build also satisfies a later plain (lite) request: an
# environment with a compiled mmcv keeps it.
fingerprint() {
    cat "$ROOT/setup.cfg" "$ROOT/setup.py" "$ROOT/tools/dev/setup_env.sh" "$ROOT/tools/dev/setup_check.py" \
        "$ROOT/tools/dev/uv_index_args.py" "$ROOT/inline_mm/version.py" 2>/dev/null \
        | sha256sum | cut -d' ' -f1
}
if [[ -f "$STAMP" ]]; then
    read -r done_hash done_choice done_stack <"$STAMP" || true
    # A cheap re-check of what later installs by hand tend to break (no heavy imports).
    if [[ "$done_hash" == "$(fingerprint)" && "${done_stack:-upstream}" == "$STACK" \
          && ( "$done_choice" == "$MMCV_CHOICE" || "$done_choice" == full ) ]] \
        && "$VENV/bin/python" -c "
import importlib.metadata as md, importlib.util as u, sys
from packaging.version import Version as V
ok = V('77.0.3') <= V(md.version('setuptools')) < V('81') and u.find_spec('mmcv') and u.find_spec('inline_mm')
sys.exit(0 if ok else 1)" 2>/dev/null; then
        exit 0
    fi
    log "no verified set-up matches (first run, changed inputs, or a broken environment): setting up"
fi
rm -f "$STAMP"
start_all=$SECONDS

if [[ -z "${PYTHON:-}" ]]; then
    if command -v python3.11 >/dev/null; then PYTHON=python3.11; else PYTHON=python3; fi
fi
if [[ ! -x "$VENV/bin/python" ]]; then
    if "$PYTHON" -c "import torch, torchvision" 2>/dev/null; then
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

# --- the installer: uv where it can be had, else pip ------------------------------------------------
INSTALLER="${INLINE_MM_INSTALLER:-auto}"
case "$INSTALLER" in auto|uv|pip) ;; *) die "INLINE_MM_INSTALLER=$INSTALLER: expected auto, uv or pip";; esac
UV=""
if [[ "$INSTALLER" != pip ]] && grep -qiE '^include-system-site-packages *= *true' "$VENV/pyvenv.cfg"; then
    # uv does not see packages outside the environment: it would install a second torch.
    [[ "$INSTALLER" == uv ]] && die "INLINE_MM_INSTALLER=uv: $VENV uses the interpreter's" \
        "packages (its torch), which uv does not see; use pip (INLINE_MM_INSTALLER=auto)"
    log "$VENV uses the interpreter's torch, which uv does not see: installing with pip"
    INSTALLER=pip
fi
if [[ "$INSTALLER" != pip ]]; then
    if command -v uv >/dev/null && uv --version >/dev/null 2>&1; then
        UV="$(command -v uv)"
    elif [[ -x "$VENV/bin/uv" ]] || "$PY" -m pip install -q --progress-bar off \
            --disable-pip-version-check 'uv>=0.5,<1' >/dev/null 2>&1; then
        UV="$VENV/bin/uv"
    fi
    if [[ -n "$UV" ]] && ! UV_INDEX="$("$PY" "$ROOT/tools/dev/uv_index_args.py")"; then
        UV=""
    fi
    if [[ -z "$UV" ]]; then
        [[ "$INSTALLER" == uv ]] && die "INLINE_MM_INSTALLER=uv: no uv on PATH and \`pip install uv\`" \
            "failed (or pip's settings cannot be handed to it, above)"
        log "uv not available (no uv on PATH, \`pip install uv\` failed): installing with pip"
    fi
fi
if [[ -n "$UV" ]]; then
    mapfile -t UV_INDEX_ARGS <<<"$UV_INDEX"
    # uv trusts its own CA roots; pip's bundle (a proxy's, a company's) is handed over too.
    PIP_CERT_FILE="$("$PY" "$ROOT/tools/dev/uv_index_args.py" --cert)"
    if [[ -z "${SSL_CERT_FILE:-}" && -n "$PIP_CERT_FILE" ]]; then export SSL_CERT_FILE="$PIP_CERT_FILE"; fi
    log "installing with $("$UV" --version) (pip's indexes, find-links and constraints handed over)"
    # --compile-bytecode: what it installs gets its byte-code now, as pip's installs do (else
    # every import compiles it again where PYTHONDONTWRITEBYTECODE is set, as it is in CI).
    PIP=("$UV" pip install -q --compile-bytecode --python "$PY" "${UV_INDEX_ARGS[@]}")
    UNINSTALL=("$UV" pip uninstall -q --python "$PY")
else
    PIP=("$PY" -m pip install -q --progress-bar off --disable-pip-version-check)
    UNINSTALL=("$PY" -m pip uninstall -y -q)
fi

# --- torch: keep whatever the venv already has; otherwise install the pinned spec -----------------
if "$PY" -c "import torch, torchvision" 2>/dev/null; then
    log "torch already present: $("$PY" -c 'import torch; print(torch.__version__)')"
else
    TORCH_SPEC="${TORCH_SPEC:-torch==2.14.1 torchvision==0.29.1}"
    log "installing $TORCH_SPEC"
    # shellcheck disable=SC2086
    "${PIP[@]}" $TORCH_SPEC
fi
# Every later install is constrained to the torch we have (no dependency may pull a second,
# multi-GB torch) and to the setuptools range that both torch and mmengine accept.
CONSTRAINTS="$VENV/inline_mm-constraints.txt"
"$PY" - "$SETUPTOOLS_RANGE" >"$CONSTRAINTS" <<'EOF'
import importlib.metadata as md, sys
for name in ("torch", "torchvision"):
    try:
        print(f"{name}=={md.version(name)}")
    except md.PackageNotFoundError:
        pass
print(sys.argv[1])
EOF
CPIP=("${PIP[@]}" -c "$CONSTRAINTS")
# What is left goes in one resolution (the mmcv chosen below joins it): one pass of the
# resolver over the indexes instead of one per package group.
if [[ "$STACK" == onedl ]]; then
    MAIN=("$SETUPTOOLS_RANGE" wheel "onedl-mmengine==$ONEDL_MMENGINE_VERSION")
else
    MAIN=("$SETUPTOOLS_RANGE" wheel "mmengine==0.10.7")
fi

# --- mmcv --------------------------------------------------------------------------------------------
compiled_mmcv() { "$PY" -c "
import importlib.util, sys
spec = importlib.util.find_spec('mmcv._ext')
sys.exit(0 if spec and spec.origin and not spec.origin.endswith('mmcv_ext.py') else 1)" 2>/dev/null; }
mmcv_version() { "$PY" -c "import importlib.metadata as m
for d in ('mmcv', 'mmcv-lite', 'onedl-mmcv'):
    try: print(d, m.version(d)); break
    except m.PackageNotFoundError: pass" 2>/dev/null; }

if compiled_mmcv; then
    log "keeping the compiled mmcv already installed ($(mmcv_version))"
elif [[ "$STACK" == onedl ]]; then
    # onedl-mmcv ships no mmcv-lite since 2.3.0 and only an sdist here; without its ops it is
    # pure Python (a few seconds to build) and depends on onedl-mmengine, not on `mmengine`.
    log "onedl-mmcv $ONEDL_MMCV_VERSION, built without ops (MMCV_WITH_OPS=0;" \
        "nms/RoIAlign from torchvision), joins the install below"
    export MMCV_WITH_OPS=0
    MAIN+=("onedl-mmcv==$ONEDL_MMCV_VERSION")
elif [[ "$MMCV_CHOICE" == lite ]]; then
    log "mmcv-lite $MMCV_VERSION (no compiled ops; nms/RoIAlign from torchvision) joins the" \
        "install below"
    MAIN+=("mmcv-lite==$MMCV_VERSION")
else
    # (the build's check imports mmcv, which imports mmengine: that goes in first)
    "${CPIP[@]}" "${MAIN[@]}"
    read -r TORCH_VER TORCH_CUDA PY_TAG HAVE_GPU < <("$PY" - <<'EOF'
import sys, torch
print(torch.__version__.split("+")[0], torch.version.cuda or "none",
      f"py{sys.version_info.major}{sys.version_info.minor}", int(torch.cuda.is_available()))
EOF
    )
    if [[ -z "${MMCV_WITH_CUDA:-}" ]]; then
        # Auto: CUDA ops only where they can run (a CUDA torch on a machine without a GPU gets
        # CPU ops; the CUDA build takes ~40 min on 2 cores and could not be used here).
        if [[ "$TORCH_CUDA" != none && "$HAVE_GPU" == 1 ]] && command -v nvcc >/dev/null; then
            MMCV_WITH_CUDA=1
        else
            MMCV_WITH_CUDA=0
        fi
    fi
    if [[ "$MMCV_WITH_CUDA" == 1 ]]; then FLAVOUR="cu${TORCH_CUDA}"; else FLAVOUR=cpu; fi
    WHEEL_DIR="$CACHE/wheels/mmcv-$MMCV_VERSION-torch$TORCH_VER-$FLAVOUR-$PY_TAG"
    if ! ls "$WHEEL_DIR"/mmcv-*.whl >/dev/null 2>&1; then
        BUILD="$(mktemp -d)"
        trap 'rm -rf "$BUILD"' EXIT
        log "building mmcv $MMCV_VERSION from source ($FLAVOUR ops) - once per machine; ~15 min on 2 cores"
        # A throw-away build environment: mmcv 2.1.0's setup.py needs the pkg_resources of
        # setuptools < 70, which must never reach .venv (mmengine and torch need >= 77.0.3).
        "$PYTHON" -m venv --system-site-packages "$BUILD/env"
        echo "$VENV/lib/$("$PY" -c 'import sys; print(f"python{sys.version_info.major}.{sys.version_info.minor}")')/site-packages" \
            >"$("$BUILD/env/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/venv_torch.pth"
        "$BUILD/env/bin/python" -m pip install -q --disable-pip-version-check "setuptools<70" ninja wheel
        "$PY" -m pip download -q --no-deps --no-binary :all: -d "$BUILD" "mmcv==$MMCV_VERSION"
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
        ( "$BUILD/env/bin/python" -m pip wheel --no-build-isolation --no-deps -w "$BUILD/dist" "$SRC" \
            >"$BUILD/build.log" 2>&1 ) &
        pid=$!
        while kill -0 "$pid" 2>/dev/null; do
            sleep 30
            kill -0 "$pid" 2>/dev/null && log "still building mmcv ... $(( SECONDS - start ))s elapsed"
        done
        if ! wait "$pid"; then
            tail -n 40 "$BUILD/build.log"
            die "mmcv build (log above); see docs/troubleshooting.md"
        fi
        mkdir -p "$WHEEL_DIR"
        cp "$BUILD"/dist/mmcv-*.whl "$WHEEL_DIR/"
        log "mmcv built in $(( SECONDS - start ))s; cached in $WHEEL_DIR"
    else
        log "reusing cached mmcv wheel from $WHEEL_DIR"
    fi
    # mmcv and mmcv-lite both own the `mmcv/` package: never leave both installed.
    "${UNINSTALL[@]}" mmcv-lite 2>/dev/null || true
    "${CPIP[@]}" --no-deps --force-reinstall "$WHEEL_DIR"/mmcv-*.whl
    MAIN+=(addict packaging Pillow pyyaml yapf opencv-python)
fi

# --- the rest, and inline_mm in editable mode ------------------------------------------------------
# openmim (`mim train/test`): its dependency chain opendatalab -> openxlab pins setuptools~=60.2,
# which would break torch and mmengine; mim runs without them, so it is installed without its
# declared dependencies, and the ones it imports (click ... tabulate) join the main install.
# On the onedl stack its own fork, onedl-mim (openmim looks the codebases up by the upstream
# distribution names and offers to install upstream mmdet); both own `mim/`.
MIM_DEPS=(click colorama model-index pandas requests rich tabulate)
if [[ "$STACK" == onedl ]]; then
    log "installing onedl-mmengine, onedl-mmcv, onedl-mmdetection, onedl-mmsegmentation, timm," \
        "stock-tool extras and inline_mm (editable)"
    "${CPIP[@]}" "${MAIN[@]}" "${MIM_DEPS[@]}" -e "$ROOT[onedl,dev]"
    "${UNINSTALL[@]}" openmim 2>/dev/null || true
    "${CPIP[@]}" --no-deps onedl-mim==0.5.1
else
    log "installing mmengine, mmcv, mmdet, mmsegmentation, timm, stock-tool extras, the app's" \
        "Gradio and inline_mm (editable)"
    "${CPIP[@]}" "${MAIN[@]}" "${MIM_DEPS[@]}" -e "$ROOT[mm,dev,app]"
    "${UNINSTALL[@]}" onedl-mim 2>/dev/null || true
    "${CPIP[@]}" --no-deps openmim
fi
compiled_mmcv || [[ "$MMCV_CHOICE" == lite || "$STACK" == onedl ]] \
    || die "mmcv installed but its compiled extension does not import"
# The import hook that backs mmcv's compiled entry points with torchvision on mmcv-lite
# (harmless with a compiled mmcv: it only answers when no `mmcv._ext` exists) and lets configs
# name `inline_mm::` bases.  A wheel brings its .pth; an editable install does not: write it
# (the same line, so running this again changes nothing).
"$PY" -m _inline_mm_mmcv_hook install >/dev/null

# --- self-check: no stamp unless the result works -------------------------------------------------
log "self-check"
"$PY" "$ROOT/tools/dev/setup_check.py" || die "self-check (above); run this command again after fixing"
if compiled_mmcv; then MMCV_DONE=full; else MMCV_DONE=lite; fi
echo "$(fingerprint) $MMCV_DONE $STACK" >"$STAMP"
log "done in $(( SECONDS - start_all ))s: $VENV ($STACK stack)"
