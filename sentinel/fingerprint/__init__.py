"""The correctness fingerprint: taken once per model and weights, kept, served, commanded."""
