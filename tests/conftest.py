"""Every test process starts as sentinel's entry points do: booted first (:mod:`sentinel.boot`).

In-process daemons, CLI calls and servers then log as ``sentinel run`` does
(redacted lines on stderr until a command configures its own), whichever
test happens to run first in a worker. Under xdist, whole files run slowest
first, so the tier's two workers finish together (:mod:`tests.durations`).
"""

from __future__ import annotations

import pytest

from sentinel.boot import boot
from tests import durations


def pytest_configure(config: pytest.Config) -> None:
    boot()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In an xdist worker, whole files slowest first (:mod:`tests.durations`).

    Every worker collects and orders alike, so xdist sees one collection; under
    ``--dist loadfile --no-loadscope-reorder`` (the Makefile's tiers) it hands files
    out in this order. A run without workers keeps pytest's order.
    """
    if hasattr(config, "workerinput"):
        items[:] = durations.slowest_files_first(items, durations.load())
