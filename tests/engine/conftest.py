"""Fixtures for tests against a real vLLM (CPU build, tiny generated model).

``engine`` is the session's :class:`~tests.engine.session.EngineServer`: base URL,
model name, API pid, the fault switch of the chaos plugin and psutil helpers
for the EngineCore and worker processes. After every test marked ``engine``
every fault is cleared, stopped processes are continued, and a canary must
succeed; otherwise the server is restarted and the test that broke it fails.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.engine.session import EngineServer, healthy_between_tests, shared_server


@pytest.fixture(scope="session")
def engine(pytestconfig: pytest.Config) -> EngineServer:
    return shared_server(pytestconfig)


def _uses_shared_server(item: pytest.Item) -> bool:
    """Whether a test runs on the session's server (tests of another release or of a
    multi-process engine start their own, and must not start this one beside it)."""
    return "engine" in getattr(item, "fixturenames", ())


@pytest.fixture(autouse=True)
def _engine_healthy_after(request: pytest.FixtureRequest) -> Iterator[None]:
    if request.node.get_closest_marker("engine") is None or not _uses_shared_server(request.node):
        yield
        return
    engine: EngineServer = request.getfixturevalue("engine")
    with healthy_between_tests(engine):
        yield


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run tests marked ``engine`` last, keeping their order, those with a server of
    their own first.

    The real-vLLM environments may still be building in the background (``make
    engine-env-bg``) while the pure and loopback tiers run; the first engine
    test waits for that build on its lock. A test with its own server (another
    release, a multi-process engine) stops it at the end of its module, before the
    session's shared server starts: one server at a time on a small machine.
    """
    engine = [item for item in items if item.get_closest_marker("engine") is not None]
    if engine:
        others = [item for item in items if item.get_closest_marker("engine") is None]
        own = [item for item in engine if not _uses_shared_server(item)]
        shared = [item for item in engine if _uses_shared_server(item)]
        items[:] = others + own + shared
