"""The text canary's fallback to a plain completion: a base model without a chat template.

A base model whose tokenizer defines no chat template answers every
``/v1/chat/completions`` with HTTP 400 (vLLM: "As of transformers v4.44,
default chat template is no longer allowed, so you must provide a chat
template if the tokenizer does not define one."). The chat-needing path
kinds are set aside for it (:mod:`sentinel.record.set_aside`), but the
text canary is the control, the proof that the engine produces tokens, and
is never set aside: without somewhere else to go it would hold startup
forever and the kubelet would restart the container for it again and again.

So when the text canary's last
:data:`~sentinel.record.set_aside.FALLBACK_AFTER` canaries on chat were
all refused as a capability (a 4xx other than credentials, a proxy's
timeout or a rate limit: :func:`~sentinel.record.set_aside.refused_capability`)
and it never passed on chat in this server epoch, it asks for a plain
completion of the same prompt on ``/v1/completions`` for the rest of the
epoch, and so does every control sent beside a paired kind. The plan
(:class:`sentinel.record.plan.Plan`) and the kind's record carry the note
(``fallback``), shown with it in ``/status`` and ``/startupz``. A new epoch
(a restarted server, maybe another model) starts on chat again. Timeouts,
5xx and 401/403/429 never move it, and once the text canary passed on chat
in an epoch it never leaves chat in that epoch: a chat path that worked and
broke is a fault to report, not a server trait.

Three refusals in a row, not :data:`~sentinel.record.set_aside.SET_ASIDE_AFTER`:
a missing template refuses every chat request alike, three rule out a one-off
refusal (a reload, a proxy hiccup), and a fallback costs little when wrong
(the completion still proves the engine decodes), while every canary spent
waiting is startup time a base model cannot use. The decision is the record's
(:class:`sentinel.record.set_aside.ChatFallback`); this module is the route.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from sentinel.canary import kinds
from sentinel.canary.spec import CHAT_ENDPOINT, COMPLETIONS_ENDPOINT, CanarySpec

# Chat request fields a completion does not take (or takes with another meaning).
CHAT_ONLY = frozenset(
    {
        "messages",
        "chat_template",
        "chat_template_kwargs",
        "add_generation_prompt",
        "continue_final_message",
        "documents",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "reasoning_effort",
        "logprobs",  # a flag on chat, a count on completions
        "top_logprobs",
        "max_completion_tokens",
        "mm_processor_kwargs",
        "media_io_kwargs",
    }
)


def prompt_of(messages: Any) -> str:
    """The messages' text, one message a line (a plain prompt needs no roles)."""
    lines: list[str] = []
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, str):
            lines.append(content)
        elif isinstance(content, list):
            parts = (p.get("text") for p in content if isinstance(p, Mapping))
            lines.append(" ".join(t for t in parts if isinstance(t, str)))
    return "\n".join(line for line in lines if line)


def as_completion(spec: CanarySpec) -> CanarySpec:
    """The same canary as a plain completion of its messages' text, on ``/v1/completions``."""
    if spec.endpoint != CHAT_ENDPOINT:
        return spec
    request = {k: v for k, v in spec.request.items() if k not in CHAT_ONLY}
    limit = spec.request.get("max_completion_tokens")
    if limit is not None:
        request.setdefault("max_tokens", limit)
    request["prompt"] = prompt_of(spec.request.get("messages")) or "ok"
    return replace(spec, endpoint=COMPLETIONS_ENDPOINT, request=request)


class TextRoute:
    """Where the text canaries go in the current epoch: as configured, or the fallback.

    Whether to fall back is the plan's word (:class:`sentinel.record.plan.Plan`,
    decided by :class:`sentinel.record.set_aside.ChatFallback`); this is only how.
    """

    def __init__(self, specs: Iterable[CanarySpec]) -> None:
        chat = [s for s in specs if s.kind == kinds.CONTROL and s.endpoint == CHAT_ENDPOINT]
        self._plain = {s.name: as_completion(s) for s in chat}

    def spec(self, spec: CanarySpec, fallback: str) -> CanarySpec:
        """``spec`` as it goes out now: on completions once its kind fell back (``fallback``)."""
        if spec.kind != kinds.CONTROL or not fallback:
            return spec
        plain = self._plain.get(spec.name)
        return spec if plain is None else replace(plain, priority=spec.priority)
