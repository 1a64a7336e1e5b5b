"""Reading a canary's reply: JSON and error bodies, choices, usage, and every failure's reason.

The runner (:mod:`sentinel.canary.runner`) owns the exchange and the clock;
this module owns what the bytes mean. :func:`classify` is the one place an
exception becomes a closed :class:`~sentinel.canary.result.Reason`, and
:class:`CanaryFailure` is how a reply that is not an answer says why, raised
inside the runner and never out of it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx_sse

from sentinel.canary.capability import missing_endpoint
from sentinel.canary.protocol import CanaryKindDriver, Reply
from sentinel.canary.refusal import Refusal, refusal_of
from sentinel.canary.result import Generation, Reason
from sentinel.transport import TransportFailure, classify_transport


class CanaryFailure(Exception):
    """A failed exchange with its closed reason; raised inside the runner, never out of ``run``."""

    def __init__(
        self,
        reason: Reason,
        detail: str,
        *,
        http_status: int | None = None,
        refusal: Refusal | None = None,
    ) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail
        self.http_status = http_status
        self.refusal = refusal

    def prefixed(self, where: str) -> CanaryFailure:
        """The same failure (reason, status, refusal state) with ``where`` before its detail."""
        return CanaryFailure(
            self.reason,
            f"{where}: {self.detail}",
            http_status=self.http_status,
            refusal=self.refusal,
        )


# The canary vocabulary for each transport failure. Only a refusal or an
# unreachable address is CONNECT (the scheduler reads it as "nothing listens");
# a reset, a TLS failure or a broken answer is a server that is there and
# failed the canary, so it is PROTOCOL, never CONNECT.
TRANSPORT_REASONS = {
    TransportFailure.REFUSED: Reason.CONNECT,
    TransportFailure.UNREACHABLE: Reason.CONNECT,
    TransportFailure.TIMEOUT: Reason.TIMEOUT,
    TransportFailure.RESET: Reason.PROTOCOL,
    TransportFailure.TLS: Reason.PROTOCOL,
    TransportFailure.PROTOCOL: Reason.PROTOCOL,
    # An oversized or undecodable reply is the body's fault, not the connection's.
    TransportFailure.OVERSIZED: Reason.BAD_BODY,
    TransportFailure.DECODING: Reason.BAD_BODY,
}


def classify(exc: BaseException, *, responded: bool) -> tuple[Reason, str]:
    """The one place a canary's exceptions become reasons.

    Transport failures are named by :func:`sentinel.transport.classify_transport`
    (shared with the evidence adapters) and only translated here; the detail
    keeps the transport name and whether headers had arrived, so ``/status``
    tells a reset before a response from one that cut a stream short.
    """
    if isinstance(exc, CanaryFailure):
        return exc.reason, exc.detail
    if isinstance(exc, TimeoutError):
        return Reason.TIMEOUT, "deadline passed"
    if isinstance(exc, httpx_sse.SSEError):  # an httpx.TransportError, but the body's fault
        return Reason.BAD_BODY, f"broken event stream: {exc}"
    failure = classify_transport(exc)
    if failure is not None:
        when = "after the response headers" if responded else "before a response"
        return TRANSPORT_REASONS[failure], f"{failure} {when}: {type(exc).__name__}: {exc}"
    if isinstance(exc, ValueError | KeyError | TypeError | UnicodeDecodeError):
        return Reason.BAD_BODY, f"{type(exc).__name__}: {exc}"
    return Reason.PROTOCOL, f"{type(exc).__name__}: {exc}"


def decode_json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        raise CanaryFailure(Reason.BAD_BODY, f"not JSON: {raw[:80]!r}") from None


def error_of(payload: Any) -> tuple[int | None, str]:
    """The status and message of an error body, in either shape vLLM has used.

    Current: ``{"error": {"message", "type", "param", "code"}}``; older:
    ``{"object": "error", "message", "type", "code"}``.
    """
    if not isinstance(payload, dict):
        return None, ""
    inner = payload.get("error")
    source = inner if isinstance(inner, dict) else payload
    message = source.get("message")
    if not isinstance(message, str):
        message = inner if isinstance(inner, str) else ""
    code = source.get("code")
    return (code if isinstance(code, int) and not isinstance(code, bool) else None), message


def refusal_failure(status: int | None, message: str, where: str) -> CanaryFailure | None:
    """The failure a deliberate refusal is (None: the error is not one).

    ``status`` is the HTTP status or a streamed error event's ``code`` (never
    its ``type``: vLLM's chat stream says InternalServerError for a paused
    503). Admission keeps its own reason (load shedding, read by the metrics
    and the engine rule); every other refusal is REFUSED with its state.
    """
    refusal = refusal_of(status, message)
    if refusal is None:
        return None
    reason = Reason.ADMISSION if refusal is Refusal.ADMISSION else Reason.REFUSED
    return CanaryFailure(reason, f"{where}: {message}", http_status=status, refusal=refusal)


def stream_failure(chunk: Mapping[str, Any]) -> CanaryFailure:
    """The failure an error event in a stream is (vLLM sends it after its HTTP 200).

    Its ``code`` stands for the status: a refusal is read as one (the paused and
    admission 503s come this way to a streamed request), anything else is an
    HTTP failure with that code.
    """
    status, message = error_of(chunk)
    refused = refusal_failure(status, message, "error in stream")
    if refused is not None:
        return refused
    return CanaryFailure(Reason.HTTP_STATUS, f"error in stream: {message}", http_status=status)


def status_failure(status: int, raw: bytes, driver: CanaryKindDriver | None) -> CanaryFailure:
    try:
        payload: Any = json.loads(raw)
    except ValueError:
        payload = None
    _, message = error_of(payload)
    if not message:
        message = raw[:120].decode("utf-8", "replace")
    refused = refusal_failure(status, message, f"HTTP {status}")
    if refused is not None:
        return refused
    if missing_endpoint(status, message):
        message = f"no such endpoint on this server ({message.strip() or 'empty body'})"
    if driver is not None:
        special = driver.rejection(status, message)
        if special is not None:
            return CanaryFailure(special, f"HTTP {status}: {message}", http_status=status)
    return CanaryFailure(Reason.HTTP_STATUS, f"HTTP {status}: {message}", http_status=status)


def int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def choice_text(choice: Mapping[str, Any], *, chat: bool, delta: bool) -> str:
    if not chat:
        value = choice.get("text")
    else:
        message = choice.get("delta" if delta else "message")
        if message is None and delta:
            return ""
        if not isinstance(message, dict):
            raise CanaryFailure(Reason.BAD_BODY, "choice has no message")
        value = message.get("content")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise CanaryFailure(Reason.BAD_BODY, "generated text is not a string")
    return value


# Where a reasoning parser puts thinking: ``reasoning`` in vLLM 0.32 (and every
# release since the rename), ``reasoning_content`` before it (older servers and
# proxies still send it).
REASONING_FIELDS = ("reasoning", "reasoning_content")


def choice_reasoning(choice: Mapping[str, Any], *, chat: bool, delta: bool) -> str:
    """The reasoning text of a chat choice (or stream delta); "" when there is none."""
    if not chat:
        return ""
    message = choice.get("delta" if delta else "message")
    if not isinstance(message, dict):
        return ""
    for field in REASONING_FIELDS:
        value = message.get(field)
        if value is None:
            continue
        if not isinstance(value, str):
            raise CanaryFailure(Reason.BAD_BODY, f"{field} is not a string")
        if value:
            return value
    return ""


def parse_reply(payload: Any, *, chat: bool) -> Reply:
    if not isinstance(payload, dict):
        raise CanaryFailure(Reason.BAD_BODY, "reply is not a JSON object")
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise CanaryFailure(Reason.BAD_BODY, "reply has no choices")
    usage = payload.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    finish = choices[0].get("finish_reason")
    return Reply(
        text=choice_text(choices[0], chat=chat, delta=False),
        prompt_tokens=int_or_none(usage.get("prompt_tokens")),
        completion_tokens=int_or_none(usage.get("completion_tokens")),
        finish_reason=str(finish) if finish is not None else None,
        reasoning=choice_reasoning(choices[0], chat=chat, delta=False),
        generations=generations_of(choices),
    )


# Bounds on what one reply may make sentinel hold: a correctness check asks for
# a few prompts of a few tokens each.
MAX_GENERATIONS = 16
MAX_GENERATED_TOKENS = 256
TOKEN_ID_PREFIX = "token_id:"  # vLLM's form under ``return_tokens_as_token_ids``


def generations_of(choices: list[Any]) -> tuple[Generation, ...]:
    """Every choice's token ids and log-probabilities, in ``index`` order; () if any lacks them.

    Completions carry ``logprobs.tokens`` / ``token_logprobs`` / ``top_logprobs``,
    chat ``logprobs.content[]``; token ids come from vLLM's ``token_ids`` or
    from ``token_id:N`` tokens. A reply that gives no ids or a log-probability
    that is not a number yields nothing: the check cannot be judged on it.
    """
    if len(choices) > MAX_GENERATIONS:
        return ()
    found: list[tuple[int, Generation]] = []
    for position, choice in enumerate(choices):
        if not isinstance(choice, dict):
            return ()
        generation = _generation(choice)
        if generation is None:
            return ()
        index = int_or_none(choice.get("index"))
        found.append((position if index is None else index, generation))
    return tuple(g for _, g in sorted(found, key=lambda item: item[0]))


def _generation(choice: Mapping[str, Any]) -> Generation | None:
    logprobs = choice.get("logprobs")
    if not isinstance(logprobs, dict):
        return None
    content = logprobs.get("content")
    if isinstance(content, list):  # chat
        steps = [s for s in content if isinstance(s, dict)]
        tokens: Any = [s.get("token") for s in steps]
        values: Any = [s.get("logprob") for s in steps]
        tops: Any = [
            {
                t.get("token"): t.get("logprob")
                for t in s.get("top_logprobs") or []
                if isinstance(t, dict)
            }
            for s in steps
        ]
    else:  # completions
        tokens, values = logprobs.get("tokens"), logprobs.get("token_logprobs")
        tops = logprobs.get("top_logprobs") or []
    if not isinstance(tokens, list) or not isinstance(values, list) or len(tokens) != len(values):
        return None
    if len(tokens) > MAX_GENERATED_TOKENS or not isinstance(tops, list):
        return None
    ids = choice.get("token_ids")
    if not isinstance(ids, list) or len(ids) != len(tokens):
        ids = [_token_id(t) for t in tokens]
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        return None
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return None
    leads = [
        _candidates(tokens[i], float(values[i]), tops[i] if i < len(tops) else None)
        for i in range(len(tokens))
    ]
    return Generation(
        tuple(ids),
        tuple(float(v) for v in values),
        tuple(found[0][1] if found else None for found in leads),
        tuple(found[0][0] if found else None for found in leads),
        tuple(leads) if any(leads) else (),
    )


def _token_id(token: Any) -> int | None:
    if not isinstance(token, str) or not token.startswith(TOKEN_ID_PREFIX):
        return None
    digits = token[len(TOKEN_ID_PREFIX) :]
    return int(digits) if digits.isascii() and digits.isdigit() and len(digits) < 10 else None


# Candidates kept per token: the check asks for TOP_LOGPROBS (5); a server
# answering more is cut here, so a reply cannot make sentinel hold more.
MAX_CANDIDATES = 8


def _candidates(token: Any, logprob: float, top: Any) -> tuple[tuple[int | None, float], ...]:
    """Every other candidate listed beside the chosen token, with the chosen token's lead
    over it (its log-probability less the candidate's), best first; () when none is given."""
    if not isinstance(top, dict):
        return ()
    others = sorted(
        (
            (logprob - float(v), _token_id(k))
            for k, v in top.items()
            if k != token and isinstance(v, int | float) and not isinstance(v, bool)
        ),
        key=lambda item: item[0],
    )
    return tuple((ident, lead) for lead, ident in others[:MAX_CANDIDATES])
