"""When each started server first answers HTTP: where a checker's share of the recovery starts.

A restart's time splits in two: the server's own (the kill, the process start,
the model load, until its port answers) and the checker's (from the port
answering until the kubelet counts the container ready: its startup and
readiness probes, and for sentinel its canaries on the new server). The
harness watches ``/health`` of every container the kubelet started, every
:data:`POLL_S`, and puts the first 200 on the timeline as an ``answers``
event; :func:`share` is the second part, per run. A recovered server is
*serving* once it answers a real chat request (:func:`served`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import httpx

from chaos.kubelet import Kubelet
from chaos.kubelet_state import Event, recovery

POLL_S = 0.1  # the resolution of the figure; one /health a poll, only until it answers
ANSWERS = "answers"


def watch(base_url: str) -> Callable[[Kubelet], Coroutine[Any, Any, None]]:
    """A job beside the kubelet: an ``answers`` event the first time each container answers."""

    async def run(kubelet: Kubelet) -> None:
        noted = -1
        async with httpx.AsyncClient(base_url=base_url, timeout=1.0) as client:
            while True:
                container = kubelet.state.container
                if container != noted and kubelet.pid is not None:
                    with contextlib.suppress(httpx.HTTPError):
                        if (await client.get("/health")).status_code == 200:
                            kubelet.note(ANSWERS, f"container {container} answers /health")
                            noted = container
                await asyncio.sleep(POLL_S)

    return run


def answered(events: Sequence[Event], after: int, fault_at: float) -> float | None:
    """Seconds from the fault until a container started after ``after`` first answered."""
    found = next((e for e in events if e.kind == ANSWERS and e.container > after), None)
    return None if found is None else found.at - fault_at


def share(figures: dict[str, float]) -> float | None:
    """The checker's share of the recovery: from the port answering to the container ready."""
    if "answers" not in figures or "recover" not in figures:
        return None
    return figures["recover"] - figures["answers"]


def figures(
    events: Sequence[Event], fault_at: float, container: int | None, served_at: float | None
) -> dict[str, float]:
    """A run's figures from its timeline: :func:`recovery`'s, ``served`` and ``answers``."""
    found = recovery(events, fault_at)
    if served_at is not None:
        found["served"] = served_at - fault_at
    at = answered(events, container or 0, fault_at)
    if at is not None:
        found["answers"] = at
    return found


async def served(base_url: str, within: float, clock: Callable[[], float]) -> bool:
    """Whether the server answers a real chat request (polled until ``within``)."""
    deadline = clock() + within
    async with httpx.AsyncClient(base_url=base_url, timeout=10.0) as client:
        while clock() < deadline:
            with contextlib.suppress(httpx.HTTPError, ValueError, KeyError, IndexError):
                models = (await client.get("/v1/models")).json()["data"]
                body = {
                    "model": models[0]["id"],
                    "messages": [{"role": "user", "content": "Say hello."}],
                    "max_tokens": 4,
                }
                reply = await client.post("/v1/chat/completions", json=body)
                if reply.status_code == 200 and reply.json()["choices"]:
                    return True
            await asyncio.sleep(0.5)
    return False


async def model(base_url: str) -> str:
    async with httpx.AsyncClient(base_url=base_url, timeout=10.0) as client:
        return str((await client.get("/v1/models")).json()["data"][0]["id"])
