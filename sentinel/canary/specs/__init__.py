"""The default canary catalog (YAML specs and image assets), shipped in the wheel.

A data package: the files are read by :mod:`sentinel.canary.catalog` through
:mod:`importlib.resources`; it has no code and no public names.
"""

__all__: list[str] = []
