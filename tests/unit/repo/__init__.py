"""Whole-repository checks: layering, faces, generated docs, test order, start-up weight."""
