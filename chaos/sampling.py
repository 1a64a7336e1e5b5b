"""One sample of a scenario run: sentinel's probes and verdict, vLLM's health and load.

The runner takes one a second (:func:`take_sample`), logs what changed
(:func:`changes`) and shows the latest on its live status line
(:func:`status_line`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence

import httpx
from rich.text import Text

from chaos.records import Sample, metric_values
from sentinel.daemon import Daemon

PROBES = ("livez", "readyz", "startupz", "vllm_health")


async def _code(client: httpx.AsyncClient, url: str) -> int | None:
    try:
        return (await client.get(url)).status_code
    except httpx.HTTPError:
        return None


async def take_sample(
    client: httpx.AsyncClient, daemon: Daemon, vllm_url: str, at: float
) -> tuple[Sample, bool | None]:
    """The sample at ``at``, and whether sentinel reports priority scheduling effective.

    sentinel's verdict is read from its published snapshot, which its loop
    replaces whole and never mutates, so reading it from this thread is safe.
    """
    assert daemon.http is not None
    base = daemon.http.url
    livez, readyz, startupz, health = await asyncio.gather(
        _code(client, base + "/livez"),
        _code(client, base + "/readyz"),
        _code(client, base + "/startupz"),
        _code(client, vllm_url + "/health"),
    )
    sample = Sample(at, livez, readyz, startupz, health)
    status = daemon.state.snapshot().status
    verdict = status.get("verdict") or {}
    sample.hangs = [str(h["kind"]) for h in verdict.get("hangs", [])]
    sample.epoch = (status.get("server") or {}).get("epoch")
    priority = (status.get("priority") or {}).get("effective")
    with contextlib.suppress(httpx.HTTPError, ValueError):
        response = await client.get(vllm_url + "/metrics")
        if response.status_code == 200:
            values = metric_values(response.text)
            sample.running = values.get("running")
            sample.waiting = values.get("waiting")
            sample.completed = values.get("completed")
    return sample, priority


def changes(last: Sample, sample: Sample) -> list[str]:
    """What turned between two samples, as the run's event log says it."""
    out = []
    for name in PROBES:
        before, after = getattr(last, name), getattr(sample, name)
        if before != after:
            out.append(f"{name} {before} -> {after}")
    if sample.hangs != last.hangs:
        out.append(f"sentinel hangs: {', '.join(sample.hangs) or 'none'}")
    return out


def status_line(
    scenario: str, phase: str, sample: Sample, kills: Mapping[str, Sequence[object]]
) -> Text:
    """The live one-line view: probes, vLLM's load and the would-be kills so far."""

    def mark(code: int | None) -> str:
        return "[green]200[/]" if code == 200 else f"[red]{code or '---'}[/]"

    load = "" if sample.running is None else f" running {sample.running:.0f}"
    if sample.waiting is not None:
        load += f" waiting {sample.waiting:.0f}"
    killed = " ".join(f"{k}:{len(v)}" for k, v in kills.items() if v)
    return Text.from_markup(
        f"[bold]{scenario}[/] {sample.at:6.1f}s [cyan]{phase}[/] | "
        f"livez {mark(sample.livez)} readyz {mark(sample.readyz)} "
        f"startupz {mark(sample.startupz)} | vLLM /health {mark(sample.vllm_health)}"
        f" |{load} | would-kill {killed or 'none'}"
    )
