"""Targets: parsing, resolution, the allowlist before any connection, and the pinned transport."""

from __future__ import annotations

import httpx
import pytest

from sentinel.canary.spec import TEXT
from sentinel.exporter.allowlist import Allowlist
from sentinel.exporter.config import ModuleRuntime, read_catalog
from sentinel.exporter.prober import ProbeOutcome, Prober, Refusal
from sentinel.exporter.state import TargetStore
from sentinel.exporter.target import (
    PinnedTransport,
    ResolveError,
    Target,
    TargetError,
    parse_target,
    resolve,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("vllm:8000", Target("http", "vllm", 8000)),
        ("10.0.0.1:8000", Target("http", "10.0.0.1", 8000)),
        ("[fd00::1]:8000", Target("http", "fd00::1", 8000)),
        ("http://vllm:8000", Target("http", "vllm", 8000)),
        ("http://vllm:8000/v1", Target("http", "vllm", 8000)),
        ("https://vllm.example/v1/", Target("https", "vllm.example", 443)),
        ("http://vllm", Target("http", "vllm", 80)),
    ],
)
def test_targets_that_parse(text: str, expected: Target) -> None:
    assert parse_target(text) == expected


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "empty"),
        ("vllm", "needs a port"),
        ("vllm:http", "Port could not be cast"),
        ("vllm:70000", "out of range"),
        ("ftp://vllm:21", "scheme"),
        ("http://user:pw@vllm:8000", "credentials"),
        ("http://vllm:8000/admin", "path may only be /v1"),
        ("http://vllm:8000/v1?x=1", "no query"),
        ("http://:8000", "no host"),
        ("vllm:0", "port 0"),
        ("x" * 2000, "longer than"),
    ],
)
def test_targets_that_do_not(text: str, words: str) -> None:
    with pytest.raises(TargetError, match=words):
        parse_target(text)


def test_base_url_brackets_ipv6() -> None:
    assert Target("http", "fd00::1", 8000).base_url == "http://[fd00::1]:8000"


async def test_resolve_keeps_order_drops_duplicates_and_maps_errors() -> None:
    async def resolver(host: str, port: int) -> list[str]:
        if host == "gone.example":
            raise OSError(-2, "Name or service not known")
        return ["10.0.0.2", "10.0.0.1", "10.0.0.2"]

    assert await resolve(Target("http", "a.example", 80), resolver) == ["10.0.0.2", "10.0.0.1"]
    assert await resolve(Target("http", "10.9.9.9", 80), resolver) == ["10.9.9.9"]
    with pytest.raises(ResolveError, match="not known"):
        await resolve(Target("http", "gone.example", 80), resolver)


async def test_the_pinned_transport_connects_to_the_address_and_keeps_the_name() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, text="ok")

    target = Target("https", "vllm.example", 8443)
    transport = PinnedTransport(target, "10.1.2.3", httpx.MockTransport(handler))
    async with httpx.AsyncClient(transport=transport) as client:
        await client.get("https://vllm.example:8443/v1/models")
        with pytest.raises(httpx.ConnectError, match="not the probed target"):
            await client.get("https://elsewhere.example:8443/")
        with pytest.raises(httpx.ConnectError, match="not the probed target"):
            await client.get("https://vllm.example:9999/")
    [request] = seen
    assert request.url.host == "10.1.2.3"
    assert request.url.port == 8443
    assert request.headers["host"] == "vllm.example:8443"
    assert request.extensions["sni_hostname"] == "vllm.example"


class CountingResolver:
    def __init__(self, answer: list[str]) -> None:
        self.answer = answer
        self.calls: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append(host)
        return self.answer


MODULE = ModuleRuntime("text", (TEXT,), 2.0, None, True, None)


def prober(allow: Allowlist, resolver: CountingResolver) -> Prober:
    return Prober(read_catalog(None), allow, TargetStore(10, 60), resolver=resolver)


async def test_a_name_resolving_to_a_refused_address_is_refused() -> None:
    resolver = CountingResolver(["127.0.0.1", "169.254.169.254"])
    outcome = await prober(Allowlist((), ("127.0.0.0/8",)), resolver).probe(
        Target("http", "rebind.example", 80), MODULE, 2.0
    )
    assert isinstance(outcome, Refusal)
    assert "169.254.169.254" in outcome.reason
    assert resolver.calls == ["rebind.example"]


async def test_without_cidrs_an_unlisted_name_is_refused_before_any_lookup() -> None:
    resolver = CountingResolver(["10.0.0.1"])
    outcome = await prober(Allowlist(("*.svc",), ()), resolver).probe(
        Target("http", "attacker.example", 80), MODULE, 2.0
    )
    assert isinstance(outcome, Refusal)
    assert resolver.calls == []


async def test_a_name_that_does_not_resolve_fails_with_reason_resolve() -> None:
    resolver = CountingResolver([])
    outcome = await prober(Allowlist(("*.svc",), ()), resolver).probe(
        Target("http", "vllm.svc", 80), MODULE, 2.0
    )
    assert isinstance(outcome, ProbeOutcome)
    assert outcome.failure == "resolve"
    assert outcome.results == ()
