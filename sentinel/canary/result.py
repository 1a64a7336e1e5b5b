"""The canary vocabulary shared by the runner, the scheduler, the verdict and every view.

A canary run never raises for a failure: it returns a frozen :class:`CanaryResult`
whose ``reason`` is one member of the closed :class:`Reason` enum. That enum is
the only failure label on metrics, so label cardinality stays bounded.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

from sentinel.canary.refusal import Refusal
from sentinel.canary.spec import CanaryKind


class Reason(StrEnum):
    """Why a canary ended the way it did (``ok`` for success)."""

    OK = "ok"
    TIMEOUT = "timeout"  # the whole request (or stream) missed its deadline
    CONNECT = "connect"  # refused, reset before a response, DNS, unreachable
    HTTP_STATUS = "http_status"  # a non-2xx answer
    BAD_BODY = "bad_body"  # unparsable JSON, broken SSE framing, missing fields
    EMPTY = "empty"  # a well-formed reply without any generated text
    SCHEMA = "schema"  # a structured reply that does not validate against the schema sent
    IMAGE_NOT_CONSUMED = "image_not_consumed"  # prompt tokens show the image was dropped
    UNSUPPORTED = "unsupported"  # the model rejects this kind (e.g. 400 for images)
    # Neither failed nor passed: the model only reasoned (thinking text, no answer)
    # and was cut at max_tokens, or reasoning hid the path under test. Proves nothing.
    INCONCLUSIVE = "inconclusive"
    # Refused at vLLM's admission cap (--max-num-queued-reqs, --max-num-queued-tokens):
    # HTTP 503 before the engine, whatever the priority. Load shedding, not a failure
    # of the server; no answer either (the engine rule counts it unanswered).
    ADMISSION = "admission"
    # Any other deliberate refusal: a fast 503 with a body (or a streamed error
    # event with code 503) that says the server is there and declining on purpose
    # (paused, faulted, scaling, retired, or a body nobody taught sentinel).
    # ``CanaryResult.refusal`` says which; never unanswered, never a fast failure:
    # the lifecycle, the refusal rule and the rules of each state judge it.
    REFUSED = "refused"
    PROTOCOL = "protocol"  # any other transport error


class Generation(NamedTuple):
    """One greedy generation with its log-probabilities (the correctness check's evidence).

    ``token_ids`` are the generated tokens (vLLM's ``token_id:N`` placeholders, or
    its ``token_ids``), ``logprobs`` the log-probability of each (NaN kept as
    NaN: a server computing NaNs is exactly what the check looks for), and
    ``margins`` how far each token led the runner-up and ``runner_ups`` which
    token that was (None: no runner-up given). ``candidates`` holds, per
    token, every other candidate the server listed (``top_logprobs``) with how
    far the chosen token led it, best first (an id None: named by text only);
    () where none was recorded (fingerprints written before it was kept). A
    plain tuple, so a result crosses JSON (bundles, the capture child) as lists.
    """

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    margins: tuple[float | None, ...] = ()
    runner_ups: tuple[int | None, ...] = ()
    candidates: tuple[tuple[tuple[int | None, float], ...], ...] = ()


@dataclass(frozen=True, slots=True)
class CanaryResult:
    """The outcome of one canary request.

    Times are seconds on the monotonic clock the scheduler injected, so the
    verdict can compare them with metric samples and "now".
    """

    name: str
    kind: CanaryKind
    reason: Reason
    started: float
    duration: float
    detail: str = ""
    ttft: float | None = None
    http_status: int | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    stream: bool = False
    # Streamed pieces of generated text that arrived before the canary ended
    # (None: not streamed or not counted). With ``ttft`` it tells a slow path,
    # producing tokens at the engine's pace, from one producing nothing.
    tokens_received: int | None = None
    # The data-parallel engine the canary was aimed at (vLLM's
    # ``X-data-parallel-rank``); None: unaimed, the server's balancer chose.
    # An aimed canary left unanswered is evidence against that engine only.
    engine: int | None = None
    # A late answer is an answer. ``awaiting_late``: this TIMEOUT result was
    # recorded at the deadline, but the request was left running and sentinel
    # still awaits it in the background (at most one such canary per kind, for
    # ``late_wait`` seconds past the send); a second result with ``late`` will
    # follow. ``late``: that second result, with the same ``name``, ``kind``,
    # ``engine`` and ``started``, ``duration`` up to the late answer, judged on
    # the reply as usual (TIMEOUT when ``late_wait`` ran out too: it never
    # answered); it replaces the timed-out one in the ledger's history.
    late: bool = False
    awaiting_late: bool = False
    # A correctness check's generations, one per prompt in the order sent
    # (empty for every other kind): judged against the fingerprint by the verdict.
    generations: tuple[Generation, ...] = ()
    # The deliberate refusal this answer was (None: not one): set for reasons
    # ADMISSION (always :attr:`Refusal.ADMISSION`) and REFUSED (every other
    # member), from a 503 body or a streamed error event's ``code`` and message.
    refusal: Refusal | None = None
    # A side request the canary made on the way (the multimodal baseline, sent
    # once per server and cached): (prompt_tokens, completion_tokens), either
    # None when its reply did not say; None: no side request this run. Its work
    # is sentinel's own, discounted from progress like the canary's.
    side_usage: tuple[int | None, int | None] | None = None

    @property
    def ok(self) -> bool:
        return self.reason is Reason.OK

    @property
    def generated(self) -> bool | None:
        """Whether any token was generated (None: nothing says either way)."""
        if self.completion_tokens is not None:
            return self.completion_tokens > 0
        if self.tokens_received is not None or self.ttft is not None:
            return bool(self.tokens_received) or self.ttft is not None
        return None

    @property
    def finished(self) -> float:
        return self.started + self.duration

    def log_fields(self) -> dict[str, object]:
        """The fields of the ``canary`` log line sentinel writes for this result."""
        fields: dict[str, object] = {
            "canary": self.name,
            "kind": str(self.kind),
            "ok": self.ok,
            "reason": self.reason.value,
            "duration": round(self.duration, 4),
        }
        if self.ttft is not None:
            fields["ttft"] = round(self.ttft, 4)
        if self.engine is not None:
            fields["engine"] = self.engine  # the data-parallel engine it was aimed at
        if self.detail:
            fields["detail"] = self.detail
        return fields
