"""The pure verdict and its hang rules, mostly on a virtual clock (sentinel/verdict)."""
