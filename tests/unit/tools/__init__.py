"""The repository's tools (tools/)."""
