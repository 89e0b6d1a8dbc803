"""What ``python -m benchmarks`` measures, as importable parts: :mod:`.measure` (timing,
peak memory, cost prediction), :mod:`.backbones` (whole backbones against their Softmax
counterparts), :mod:`.attention` (the attention against its plain reference), :mod:`.deit`
(InLine-DeiT-T against DeiT-T) and :mod:`.padding` (the cost of padding awareness).

The pass/fail criteria of these measurements live in ``tests/test_performance.py``.
Not imported by ``import inline_mm``.
"""
