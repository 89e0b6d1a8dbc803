"""A local web app: a config's predictions and the exact InLine attention of any point.

    python -m inline_mm.app CONFIG [CHECKPOINT]        # then open http://127.0.0.1:7860

Upload an image (or pick a bundled sample), see the model's predictions, click a point:
InLine's exact weights over the whole image for that query, beside linear and Softmax
attention from the same q and k and the block's local 3x3 kernel (the maps of
``tools/attention_map.py``, :mod:`inline_mm.visualization.attention_maps`). Served on 127.0.0.1 with
Gradio (``pip install inline_mm[app]``), which this package imports only when the app
starts: :mod:`.viewer` is the app without its page. The page: docs/attention_maps.md.
"""
