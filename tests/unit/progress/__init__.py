"""Progress evidence: real work beside sentinel's own (sentinel/progress)."""
