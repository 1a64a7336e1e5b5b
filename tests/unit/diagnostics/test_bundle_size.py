"""A bundle's size is measured as the store writes it."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from sentinel.diagnostics.sizes import json_size


def test_json_size_is_the_written_size() -> None:
    value = {
        "text": "line\n" * 1000 + "é ünïcode ✓",
        "nested": [{"a": 1, "b": [1.5, None, True]}, {"when": datetime(2026, 1, 1, tzinfo=UTC)}],
        "empty": {},
    }
    assert json_size(value) == len(json.dumps(value, indent=1, default=str).encode())
