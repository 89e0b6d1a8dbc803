# Every target sets up .venv first (idempotent; nothing is compiled: mmcv-lite + torchvision ops;
# installed with uv where it can be had, else pip: tools/dev/setup_env.sh, INLINE_MM_INSTALLER);
# with INLINE_MM_STACK=onedl, .venv-onedl (the onedl forks, onedl-mmcv without ops) instead.
# INLINE_MM_MMCV=full make setup builds compiled mmcv instead (see docs/get_started.md).
PY := $(if $(filter onedl,$(INLINE_MM_STACK)),.venv-onedl,.venv)/bin/python
PYTEST_ARGS ?=
# `make test` runs on pytest-xdist workers, one per core up to 2 (JOBS=1: one process);
# each worker's torch threads follow (tests/conftest.py).
JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); echo $$(( n < 2 ? n : 2 )))

# The second supported stack, the onedl forks (docs/get_started.md, "The onedl stack"), lives in
# .venv-onedl beside .venv; `make test-onedl` runs the tests that touch the stack there.
# The subset (tests/onedl_subset.txt, read by pytest's @file): registration, every shipped config
# resolving, a loss step of Mask R-CNN and Cascade Mask R-CNN, train/test of UperNet (seg_e2e),
# Mask R-CNN (detection_tools, the stock tools and mim), the inferencers of Mask R-CNN, Cascade,
# UperNet and Semantic FPN, checkpoint save/resume/safe loading, CPU DDP, the ops fallback.
PY_ONEDL := .venv-onedl/bin/python

.PHONY: setup demo test test-fast env clean-venv setup-onedl test-onedl env-onedl app setup-browser

setup:
	@bash tools/dev/setup_env.sh   # INLINE_MM_STACK=onedl: .venv-onedl (the onedl forks)

demo: setup
	$(PY) tools/demo.py

# The local web app (docs/attention_maps.md): `make app APP_CONFIG=... APP_CHECKPOINT=...`; by
# default the demo's config with the checkpoint `make demo` trained (random weights without one).
APP_CONFIG ?= configs/inline_swin/mask-rcnn_inline-swin-nano_fpn_1xb4-700it_toy-coco.py
APP_CHECKPOINT ?= $(shell cat work_dirs/demo/last_checkpoint 2>/dev/null)
APP_ARGS ?=
app: setup
	$(PY) -m inline_mm.app $(APP_CONFIG) $(APP_CHECKPOINT) $(APP_ARGS)

# Debian's chromium for the app's browser test (INLINE_MM_BROWSER=skip: without it).
setup-browser:
	@bash tools/dev/setup_browser.sh

# Everything, tools and end-to-end runs included (what CI runs).
test: setup setup-browser
	$(PY) -m pytest -n $(JOBS) --dist loadgroup $(PYTEST_ARGS) tests

# Models and units in-process (on the same xdist workers): no test marked subprocess or slow
# (tests/conftest.py fails an unmarked test that starts a process).
test-fast: setup
	$(PY) -m pytest -n $(JOBS) --dist loadgroup -m "not subprocess and not slow" $(PYTEST_ARGS) tests

env: setup
	$(PY) -m inline_mm.env

setup-onedl:
	@INLINE_MM_STACK=onedl bash tools/dev/setup_env.sh

test-onedl: setup-onedl
	$(PY_ONEDL) -m pytest -n $(JOBS) --dist loadgroup $(PYTEST_ARGS) @tests/onedl_subset.txt

env-onedl: setup-onedl
	$(PY_ONEDL) -m inline_mm.env

clean-venv:
	rm -rf .venv .venv-onedl
