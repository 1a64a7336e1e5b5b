"""The correctness fingerprint book and its file (sentinel/fingerprint)."""
