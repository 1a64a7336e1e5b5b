"""sentinel: is this inference server still producing tokens?"""

__version__ = "0.1.0"
