"""One module per hang kind: its knobs, its judge and its declaration (``RULE``)."""
