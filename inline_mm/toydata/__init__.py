"""Generators of small real datasets for demos and tests (tools/make_toy_dataset.py)."""
