"""Hang diagnostics: discovery, causes, bundles, dumps (sentinel/diagnostics)."""
