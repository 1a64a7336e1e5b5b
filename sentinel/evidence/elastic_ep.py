"""vLLM's ``POST /is_scaling_elastic_ep``: where an elastic expert-parallel scale stands.

In 0.33+ the scaling middleware lets ``/health`` and this route through while a
scale runs (``_SCALING_OBSERVABILITY_PATHS``), and the answer names the phase:
``{"is_scaling_elastic_ep": bool, "phase":
"idle|preparing|committing|failed|completed", "epoch", "error",
"requested_data_parallel_size"}``
(``vllm/entrypoints/serve/elastic_ep/api_router.py``). ``failed`` comes with the
error the commit raised; the process-local gate stays up after it, so the
server refuses every request for good. The route itself may answer 503
"External Elastic EP status is temporarily unavailable" (its shared store out
of reach): there, but no word. In 0.32 the middleware answers it 503 "currently
scaling" like any other path: that body says a scale runs, with no phase.

It is POST and asks the engine core, so it is asked only while another source
shows a scale or a retired rank (:mod:`sentinel.record.observers`), never on an
idle healthy server. 404 or 405: no elastic EP; it is then asked again only
every :data:`~sentinel.evidence.endpoint_poll.ABSENT_RETRY` seconds. Each answer is capped at
:data:`MAX_BODY_BYTES` and every text in it is cut short, since everything read
from the target is hostile. Never raises for a failed poll.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sentinel.evidence.endpoint_poll import EndpointPoller

PATH = "/is_scaling_elastic_ep"
MAX_BODY_BYTES = 4 * 1024
MAX_TEXT = 240  # characters kept of the error and the epoch
#: The phases vLLM 0.33+ names (``ExternalElasticEPScalePhase``), a closed set.
PHASES = frozenset({"idle", "preparing", "committing", "failed", "completed"})
RUNNING = frozenset({"preparing", "committing"})
#: The middleware's 503 body while a scale runs (0.32 gates this route too).
SCALING_MARK = "The model is currently scaling"


@dataclass(frozen=True, slots=True)
class ScaleStatus:
    """One answer of the route: the scale's phase, epoch, error and target size.

    ``phase`` is "" where the answer named none (0.32's form, or its 503 body).
    """

    scaling: bool
    phase: str = ""
    epoch: str | None = None
    error: str | None = None
    requested_size: int | None = None

    @property
    def failed(self) -> bool:
        return self.phase == "failed"

    def describe(self) -> str:
        """``phase committing, epoch 3f2a, to 4 engines`` (what ``/status`` names)."""
        parts = [f"phase {self.phase}" if self.phase else "scaling (no phase named)"]
        if self.epoch:
            parts.append(f"epoch {self.epoch}")
        if self.requested_size is not None:
            parts.append(f"to {self.requested_size} engines")
        return ", ".join(parts)


@dataclass(frozen=True, slots=True)
class ScalePoll:
    """What the route said: its status, or why it gave none (both empty: absent or not asked)."""

    status: ScaleStatus | None = None
    problem: str = ""  # "POST /is_scaling_elastic_ep: what happened", where it is there


def read_status(value: Any) -> ScaleStatus | str:
    """The status in a decoded answer, or what is wrong with it."""
    if not isinstance(value, dict):
        return "not a JSON object"
    scaling = value.get("is_scaling_elastic_ep")
    if not isinstance(scaling, bool):
        return "no 'is_scaling_elastic_ep' in the answer"
    phase = value.get("phase", "")
    if phase is None:
        phase = ""
    if not isinstance(phase, str) or (phase and phase not in PHASES):
        return f"unknown phase {(_text(phase) or '')[:40]!r}"
    size = value.get("requested_data_parallel_size")
    return ScaleStatus(
        scaling,
        phase,
        _text(value.get("epoch")),
        _text(value.get("error")),
        size if isinstance(size, int) and not isinstance(size, bool) else None,
    )


def _text(value: Any) -> str | None:
    if value is None:
        return None
    try:
        text = value if isinstance(value, str) else json.dumps(value, default=str)
    except (ValueError, RecursionError):  # hostile: nested past the recursion limit
        return "(unreadable: nested too deep)"
    return text[:MAX_TEXT]


def _message(body: bytes) -> str:
    """An error body's message (either shape vLLM uses), cut short."""
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):  # RecursionError: nested past the limit
        return body[:120].decode("utf-8", "replace")
    inner = value.get("error", value.get("detail")) if isinstance(value, dict) else None
    if isinstance(inner, dict):
        inner = inner.get("message")
    return _text(inner) or ""


class ElasticEpPoller(EndpointPoller):
    """Asks the route when told to; remembers when it is absent and asks that rarely."""

    max_body_bytes = MAX_BODY_BYTES

    async def poll(self) -> ScalePoll:
        now = self._clock()
        if self._absent(PATH, now):
            return ScalePoll()
        answer = await self._exchange("POST", PATH)
        if answer.problem:
            return ScalePoll(problem=answer.problem)
        status, body = answer.status, answer.body
        if status in (404, 405):
            self._mark_absent(PATH, now)
            return ScalePoll()
        if status != 200:
            message = _message(body)
            if status == 503 and message.startswith(SCALING_MARK):
                return ScalePoll(ScaleStatus(scaling=True))  # 0.32: the middleware gates it
            said = f": {message}" if message else ""
            return ScalePoll(problem=f"POST {PATH}: HTTP {status}{said}")
        try:
            value = json.loads(body)
        except ValueError:
            return ScalePoll(problem=f"POST {PATH}: not JSON")
        except RecursionError:  # hostile: nested past the recursion limit
            return ScalePoll(problem=f"POST {PATH}: JSON nested too deep")
        read = read_status(value)
        if isinstance(read, str):
            return ScalePoll(problem=f"POST {PATH}: {read}")
        return ScalePoll(read)
