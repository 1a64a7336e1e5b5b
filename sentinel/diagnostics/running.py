"""``sentinel doctor --sentinel URL``: what a running sentinel sees, from its ``/status``.

The doctor's other checks read local facts (the cgroup, the process table,
one ``/metrics`` scrape), which say what *will* happen. Some things only a
running sentinel knows: a canary kind it set aside for this server (replies
that only reason until ``max_tokens``, a capability refused with a 4xx, an
input the model does not take), or a server that keeps going away. With
``--sentinel`` the doctor reads that sentinel's ``/status`` once and lists:

- each canary kind set aside or disabled, with its reason, as a warning: the
  path is not watched on this server, the rest is. The text kind is the
  exception, a problem: without it sentinel cannot tell whether the engine
  generates at all;
- a server not answering, or one that went away lately (a crash loop at
  load), as ``/status`` words it (``server.not_answering``,
  ``server.departures``).

Pure checks of the parsed document, and one bounded read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx

from sentinel.diagnostics.doctor import DoctorCheck, Severity

MAX_STATUS_BYTES = 4 * 1024 * 1024
TEXT_KIND = "text"


async def fetch_status(
    sentinel_url: str,
    *,
    timeout_s: float = 3.0,
    transport: httpx.AsyncBaseTransport | None = None,
) -> tuple[dict[str, Any] | None, str | None]:
    """One ``/status`` read: (document, None) or (None, why not)."""
    url = sentinel_url.rstrip("/") + "/status"
    try:
        async with (
            httpx.AsyncClient(timeout=timeout_s, transport=transport) as http,
            http.stream("GET", url) as response,
        ):
            if response.status_code != 200:
                return None, f"HTTP {response.status_code} from {url}"
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_STATUS_BYTES:
                    return None, f"{url} answered more than {MAX_STATUS_BYTES} bytes"
    except httpx.HTTPError as exc:
        return None, f"{type(exc).__name__}: {exc}"
    try:
        document = json.loads(body)
    except ValueError as exc:
        return None, f"{url} is not JSON: {exc}"
    if not isinstance(document, dict):
        return None, f"{url} is not a JSON object"
    return document, None


def check_canaries(status: Mapping[str, Any]) -> list[DoctorCheck]:
    """Pure: each canary kind the running sentinel set aside or disabled, and why."""
    canaries = status.get("canaries")
    if not isinstance(canaries, Mapping) or not canaries:
        return [DoctorCheck("sentinel", Severity.SKIPPED, "no canaries in sentinel's /status")]
    out: list[DoctorCheck] = []
    for kind, canary in sorted(canaries.items()):
        if not isinstance(canary, Mapping) or canary.get("enabled", True):
            continue
        why = str(canary.get("disabled_reason") or "no reason given")
        if kind == TEXT_KIND:
            out.append(
                DoctorCheck(
                    "sentinel",
                    Severity.PROBLEM,
                    "text canaries disabled: sentinel cannot tell whether the engine generates",
                    why,
                )
            )
        else:
            summary = f"{kind} canaries set aside for this server (the path is not watched)"
            out.append(DoctorCheck("sentinel", Severity.WARN, summary, why))
    if not out:
        kinds = ", ".join(sorted(str(k) for k in canaries))
        out.append(
            DoctorCheck("sentinel", Severity.OK, "every canary kind runs on this server", kinds)
        )
    return out


def check_server(status: Mapping[str, Any]) -> list[DoctorCheck]:
    """Pure: a server the running sentinel sees refusing connections, or going away lately."""
    server = status.get("server")
    if not isinstance(server, Mapping):
        return []
    away = server.get("not_answering")
    if away:
        return [DoctorCheck("sentinel", Severity.WARN, "the server is not answering", str(away))]
    departures = server.get("departures")
    if isinstance(departures, Mapping) and departures.get("summary"):
        summary = f"the server {str(departures['summary']).removeprefix('it ')}"
        return [DoctorCheck("sentinel", Severity.WARN, summary, "see /status server.departures")]
    return []


def check_running(
    status: Mapping[str, Any] | None, error: str | None, url: str
) -> list[DoctorCheck]:
    """Pure: every check of one ``/status`` read (or why it could not be read)."""
    if status is None:
        why = f"sentinel /status unreachable at {url}: {error or 'no answer'}"
        return [DoctorCheck("sentinel", Severity.PROBLEM, why, "is sentinel running there?")]
    return [*check_canaries(status), *check_server(status)]


async def running_checks(
    sentinel_url: str, *, transport: httpx.AsyncBaseTransport | None = None
) -> list[DoctorCheck]:
    """Read the running sentinel's ``/status`` once and check it."""
    status, error = await fetch_status(sentinel_url, transport=transport)
    return check_running(status, error, sentinel_url)
