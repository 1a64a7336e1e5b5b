"""sentinel: is this inference server still producing tokens?

Importing the package, or any module in it, changes no process-global state:
the entry points run :func:`sentinel.boot.boot` first, which says what and why.

Each package's ``__init__`` says what it owns and lists its public names in
``__all__`` (docs/layout.md indexes every module); this one loads none of them,
so ``sentinel --help`` stays cheap.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
