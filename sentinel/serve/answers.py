"""The kubelet's probe answers: each rendered once, a settling "not yet" held a moment.

:class:`AnswerBodies` keeps the path the kubelet times free of JSON work.

A restarted server's first canaries are under way when the kubelet asks
``/startupz`` or ``/readyz``: answered at once, the probe fails and the kubelet
asks again a period later (2 s for startup, 5 s for readiness as shipped), a
period the server spends serving nothing. An answer the verdict marks
``settling`` (:class:`~sentinel.verdict.model.ProbeAnswer`: it waits only on
what is under way) is held up to ``probe_hold`` seconds, well under the
probes' timeout, and the probe is answered the moment the published answer
turns. ``/livez`` is never held: the kubelet's restart decision stays at once.

The snapshot is read, never awaited: the listener's thread has its own event
loop, and a :class:`~sentinel.evaluation.health.HealthSnapshot` is replaced in
one assignment, so a held probe looks again every :data:`HOLD_POLL_S`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

from aiohttp import web

from sentinel.evaluation.health import HealthSnapshot, HealthState, ProbeAnswer
from sentinel.serve.status_view import answer_json

HOLD_POLL_S = 0.01  # how often a held probe looks at the published snapshot again
JSON_CONTENT_TYPE = "application/json; charset=utf-8"


class AnswerBodies:
    """Each probe's answer rendered once, when it first appears, and served as bytes.

    A probe asks far more often than its answer changes (a snapshot is
    published every few seconds at most, and the answer within it changes
    only on a verdict), so a request looks its answer up by identity (or, for
    ``/healthz``, whose answer is built per call, by value) instead of
    rendering JSON on the path the kubelet times.
    """

    def __init__(self) -> None:
        self._rendered: dict[str, tuple[ProbeAnswer, bytes, int]] = {}

    def response(self, probe: str, answer: ProbeAnswer) -> web.Response:
        rendered = self._rendered.get(probe)
        if rendered is None or (rendered[0] is not answer and rendered[0] != answer):
            body = json.dumps(answer_json(answer)).encode()
            rendered = self._rendered[probe] = (answer, body, 200 if answer.ok else 503)
        return web.Response(
            body=rendered[1], status=rendered[2], headers={"Content-Type": JSON_CONTENT_TYPE}
        )


async def held(
    state: HealthState, pick: Callable[[HealthSnapshot], ProbeAnswer], hold: float
) -> ProbeAnswer:
    """The answer now, or, for a settling "not yet", the first to differ within ``hold``."""
    answer = pick(state.snapshot())
    if answer.ok or not answer.settling or hold <= 0:
        return answer
    loop = asyncio.get_running_loop()
    deadline = loop.time() + hold
    while loop.time() < deadline:
        await asyncio.sleep(min(HOLD_POLL_S, max(0.0, deadline - loop.time())))
        latest = pick(state.snapshot())
        if latest.ok != answer.ok or not latest.settling:
            return latest
    return pick(state.snapshot())
