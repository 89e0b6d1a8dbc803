"""Measuring a model without training it: its parameters and multiply-accumulates
(:mod:`.complexity`, ``tools/analysis_tools/get_flops.py``), the GPU memory a config needs,
counted on fake tensors (:mod:`.memory`, ``tools/analysis_tools/estimate_memory.py``), and one
detector's outputs compared across two runs (:mod:`.consistency`,
``tools/analysis_tools/padding_consistency.py``).

Importing this package imports nothing: import the module you need.
"""
