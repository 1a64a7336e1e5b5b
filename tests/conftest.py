"""Every test process starts as sentinel's entry points do: booted first (:mod:`sentinel.boot`).

In-process daemons, CLI calls and servers then log as ``sentinel run`` does
(redacted lines on stderr until a command configures its own), whichever
test happens to run first in a worker.
"""

from __future__ import annotations

import pytest

from sentinel.boot import boot


def pytest_configure(config: pytest.Config) -> None:
    boot()
