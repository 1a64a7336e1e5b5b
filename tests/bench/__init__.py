"""Benchmarks that print figures; not collected by pytest."""
