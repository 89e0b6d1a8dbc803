"""What a person looks at: the exact attention maps of an InLine block (:mod:`.attention_maps`:
capture, weights, the local kernel) and their pictures (:mod:`.attention_views`: maps at the
image's size, colours, figures, files). ``tools/attention_map.py`` and the app
(``python -m inline_mm.app``) draw with them; docs/attention_maps.md.

Importing this package imports nothing: import the module you need.
"""
