#!/usr/bin/env bash
# Prepare the wheels that tools/dev/gpu/cuda_check.sh installs on a GPU machine that has Python 3.12
# with torch/torchvision (and timm, opencv-python-headless, scipy, matplotlib ...) but no network
# and no compiler.  Everything here is small (~20 MB): OpenMMLab's pure-Python packages
# (mmcv-lite: no compiled ops, inline_mm backs nms/RoIAlign with torchvision), their small
# pure-Python dependencies, the two compiled ones as cp312 wheels, and setuptools < 81 (mmengine
# imports pkg_resources).  Usage:  bash tools/dev/gpu/prepare_wheels.sh [DIR]   (default: .whl)
# TARGET_PY picks the target Python of the compiled wheels (default 3.12, the GPU image's).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DIR="${1:-$ROOT/.whl}"
PY="${PYTHON:-python3}"
TARGET_PY="${TARGET_PY:-3.12}"
mkdir -p "$DIR"
PURE=(mmengine==0.10.7 mmcv-lite==2.1.0 mmdet==3.3.0 mmsegmentation==1.2.2
      addict yapf platformdirs termcolor terminaltables prettytable wcwidth ftfy
      "setuptools>=77.0.3,<81")
COMPILED=(pycocotools shapely)
"$PY" -m pip download -q --no-deps --only-binary=:all: -d "$DIR" "${PURE[@]}"
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$TARGET_PY" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$DIR" "${COMPILED[@]}"
ls -1 "$DIR"
du -sh "$DIR"
