# Every target sets up .venv first (idempotent; nothing is compiled: mmcv-lite + torchvision ops).
# INLINE_MM_MMCV=full make setup builds compiled mmcv instead (see docs/get_started.md).
PY := .venv/bin/python
PYTEST_ARGS ?=
# `make test` runs on pytest-xdist workers, one per core up to 2 (JOBS=1: one process);
# each worker's torch threads follow (tests/conftest.py).
JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); echo $$(( n < 2 ? n : 2 )))

.PHONY: setup demo test test-fast env clean-venv

setup:
	@bash tools/dev/setup_env.sh

demo: setup
	$(PY) tools/demo.py

# Everything, tools and end-to-end runs included (what CI runs).
test: setup
	$(PY) -m pytest -n $(JOBS) --dist loadgroup $(PYTEST_ARGS) tests

# Models and units in-process (on the same xdist workers): no test marked subprocess or slow
# (tests/conftest.py fails an unmarked test that starts a process).
test-fast: setup
	$(PY) -m pytest -n $(JOBS) --dist loadgroup -m "not subprocess and not slow" $(PYTEST_ARGS) tests

env: setup
	$(PY) -m inline_mm.env

clean-venv:
	rm -rf .venv
