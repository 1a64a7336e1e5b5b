"""The pollers of vLLM's small routes: one exchange, and an absent route asked rarely.

The weight poller is the one that read its answers by hand before it shared
the exchange, so its hostile answers are asked here: none may raise out of a
poll, and an absent ``/weight_info`` is asked again only after the retry.
"""

from __future__ import annotations

import asyncio
import json

import httpx

from sentinel.evidence.endpoint_poll import ABSENT_RETRY
from sentinel.evidence.weights import Identity, WeightsPoller

MODELS = {"data": [{"id": "m", "root": "/w"}]}
NESTED = b"[" * 100_000 + b"]" * 100_000  # past the recursion limit


def _poll(poller: WeightsPoller) -> Identity:
    return asyncio.run(poller.poll())


def _weights(
    answers: dict[str, httpx.Response], now: list[float], api_key: str | None = None
) -> tuple[WeightsPoller, list[httpx.Request]]:
    asked: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request)
        return answers[request.url.path]

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return WeightsPoller(client, "http://vllm/", lambda: now[0], api_key=api_key), asked


def test_the_model_and_version_are_read_with_the_api_key() -> None:
    answers = {
        "/v1/models": httpx.Response(200, json=MODELS),
        "/weight_info": httpx.Response(200, json={"weight_version": 7}),
    }
    poller, asked = _weights(answers, [0.0], api_key="sk-1")
    assert _poll(poller) == Identity("m @ /w", "7")
    assert [r.headers.get("authorization") for r in asked] == ["Bearer sk-1"] * 2


def test_hostile_bodies_are_no_answer_never_a_raise() -> None:
    answers = {
        "/v1/models": httpx.Response(200, content=NESTED),
        "/weight_info": httpx.Response(200, content=NESTED),
    }
    poller, _ = _weights(answers, [0.0])
    assert _poll(poller) == Identity(None, None)
    answers["/weight_info"] = httpx.Response(200, content=json.dumps({"weight_version": True}))
    assert _poll(poller) == Identity(None, None)  # a bool is no version


def test_an_absent_route_is_asked_again_after_the_retry_or_a_new_server() -> None:
    now = [0.0]
    answers = {"/v1/models": httpx.Response(200, json=MODELS), "/weight_info": httpx.Response(404)}
    poller, asked = _weights(answers, now)

    def weight_info_asks() -> int:
        return sum(r.url.path == "/weight_info" for r in asked)

    assert _poll(poller) == Identity("m @ /w", "")  # absent: no version declared
    now[0] = ABSENT_RETRY - 1
    assert _poll(poller) == Identity("m @ /w", "")
    assert weight_info_asks() == 1
    now[0] = ABSENT_RETRY + 1
    _poll(poller)
    assert weight_info_asks() == 2
    poller.forget()
    _poll(poller)
    assert weight_info_asks() == 3


def test_a_server_error_is_no_answer_and_not_an_absence() -> None:
    now = [0.0]
    answers = {"/v1/models": httpx.Response(200, json=MODELS), "/weight_info": httpx.Response(503)}
    poller, asked = _weights(answers, now)
    assert _poll(poller) == Identity("m @ /w", None)
    _poll(poller)
    assert sum(r.url.path == "/weight_info" for r in asked) == 2  # asked every poll
