# Every target sets up .venv first (idempotent; the first run builds mmcv, ~15 min on 2 cores).
PY := .venv/bin/python
PYTEST_ARGS ?=

.PHONY: setup demo test env clean-venv

setup:
	@bash tools/setup_env.sh

demo: setup
	$(PY) tools/demo.py

test: setup
	$(PY) -m pytest $(PYTEST_ARGS) tests

env: setup
	$(PY) -m inline_mm.env

clean-venv:
	rm -rf .venv
