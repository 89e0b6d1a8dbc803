# Every target sets up .venv first (idempotent; nothing is compiled: mmcv-lite + torchvision ops).
# INLINE_MM_MMCV=full make setup builds compiled mmcv instead (see docs/get_started.md).
PY := .venv/bin/python
PYTEST_ARGS ?=

.PHONY: setup demo test env clean-venv

setup:
	@bash tools/dev/setup_env.sh

demo: setup
	$(PY) tools/demo.py

test: setup
	$(PY) -m pytest $(PYTEST_ARGS) tests

env: setup
	$(PY) -m inline_mm.env

clean-venv:
	rm -rf .venv
