"""sentinel: is this inference server still producing tokens?

Importing the package, or any module in it, changes no process-global state:
the entry points run :func:`sentinel.boot.boot` first, which says what and why.
"""

__version__ = "0.1.0"
