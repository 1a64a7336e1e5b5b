"""The small protocol every canary kind implements, and the values that cross it.

A kind is one module: the spec fields it claims, its default deadline,
interval and jitter, the checks its own fields must pass when the catalog
loads, what to send (a request body built from its spec and a fresh nonce),
how to judge what came back (a parsed :class:`Reply`) and whether it can be
validated at all on a server, given what that server's command line says
(:class:`ServerFacts`). It never does network I/O and never sees sockets,
clocks or deadlines: the runner owns the exchange and the scheduler owns time,
so each kind is a pure module tested with tables.

Every body built here varies per run without changing the answer (the nonce in
the OpenAI ``user`` field, which vLLM accepts and ignores), so no cache or
deduplicating proxy in front of the server can answer for it; and every chat
body asks the chat template not to think (``enable_thinking: false``), so a
reasoning model answers a canary's few tokens directly.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from sentinel.canary.result import Generation, Reason

# Re-exported for the runner, which names the endpoint from here.
from sentinel.canary.spec import CHAT_ENDPOINT as CHAT_ENDPOINT
from sentinel.canary.spec import CanaryKind, CanarySpec

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable  # annotations only: the catalog passes it

# The OpenAI ``user`` field carries the run's nonce. vLLM 0.32 declares it on
# ChatCompletionRequest and CompletionRequest ("NOTE this will be ignored by
# vLLM"): it changes neither the prompt nor sampling, so a temperature-0 answer
# stays the same while no two canary bodies are byte-identical.
NONCE_FIELD = "user"
NONCE_PREFIX = "sentinel-"
# vLLM passes ``chat_template_kwargs`` to the chat template, which ignores the
# names it does not use (vLLM drops them before rendering), so asking every chat
# canary not to think is safe on any model. /v1/completions has no template.
NO_THINKING: Mapping[str, Any] = {"enable_thinking": False}


@dataclass(frozen=True, slots=True)
class KindDefaults:
    """Timing a kind's canaries get unless their YAML says otherwise (README, "Defaults")."""

    deadline: float
    interval: float
    jitter: float = 0.0


@dataclass(frozen=True, slots=True)
class CanaryRequest:
    """What one canary run sends.

    ``schema`` is the exact JSON schema sent (nonce filled in), so validation
    checks the reply against what the server was asked for, not the template.
    ``baseline_body`` is the same prompt without its image: the multimodal kind
    compares prompt token counts against it.
    """

    body: Mapping[str, Any]
    nonce: str
    schema: Mapping[str, Any] | None = None
    baseline_body: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Reply:
    """The parts of a completion reply that validation looks at.

    ``text`` is the answer (``content``); ``reasoning`` is what a reasoning
    parser on the server split off as thinking (vLLM's ``reasoning``, formerly
    ``reasoning_content``). Both are generated text.
    """

    text: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    reasoning: str = ""
    # Every choice's token ids with their log-probabilities, where the reply
    # carries them (a correctness check asks for them); empty otherwise.
    generations: tuple[Generation, ...] = ()

    @property
    def reasoning_only(self) -> bool:
        """The model generated thinking and no answer."""
        return bool(self.reasoning) and not self.text


@dataclass(frozen=True, slots=True)
class ServerFacts:
    """What the server's command line says that decides whether a kind can be validated.

    Read from the vLLM API server's command line by the process watcher (and
    by ``sentinel doctor``), never guessed from failing replies.
    ``reasoning_parser`` is the ``--reasoning-parser`` in effect (None: none).
    """

    reasoning_parser: str | None = None


@dataclass(frozen=True, slots=True)
class Judgement:
    """A kind's verdict on one reply: a closed reason plus a short human detail."""

    reason: Reason
    detail: str = ""


OK = Judgement(Reason.OK)


def nothing_generated(reply: Reply) -> Judgement | None:
    """The failure of a reply that generated no token, for every kind; None if it did.

    Generated *tokens* are the proof of work, not visible text: a reply whose
    usage says zero completion tokens generated nothing whatever its text, and
    one without text proves something only when its usage counts tokens.
    """
    generated_text = reply.text or reply.reasoning
    if reply.completion_tokens == 0 or (not generated_text and not reply.completion_tokens):
        return Judgement(
            Reason.EMPTY,
            f"no generated tokens (finish_reason {reply.finish_reason!r}, "
            f"completion_tokens {reply.completion_tokens!r})",
        )
    return None


def thought_cut_short(reply: Reply) -> Judgement | None:
    """INCONCLUSIVE for a reply that only reasoned and hit ``max_tokens``; None otherwise.

    The engine generated, but the answer the canary asked for never came: the
    chat template ignored ``enable_thinking: false`` and the few tokens a canary
    allows were spent thinking. Neither a failure (the server works) nor a
    success (nothing the kind checks was shown).
    """
    if reply.reasoning_only and reply.finish_reason == "length":
        return Judgement(
            Reason.INCONCLUSIVE,
            f"only reasoning generated ({len(reply.reasoning)} characters, completion_tokens "
            f"{reply.completion_tokens!r}) before max_tokens (finish_reason 'length'): "
            "the chat template did not honour enable_thinking=false",
        )
    return None


class CanaryKindDriver(Protocol):
    """One canary kind: what the catalog requires of its specs, what it sends, how it judges.

    The object a kind module registers (:func:`sentinel.canary.kinds.register`)
    and the runner, catalog and scheduler drive; :class:`KindBase` holds the
    answers most kinds give alike.
    """

    @property
    def kind(self) -> CanaryKind: ...

    @property
    def path(self) -> bool:
        """Whether this kind tests one path of the server against a paired text control.

        A path kind's misses while its control succeeds confirm a *path hang*
        of that kind; the catalog refuses a path kind without a text canary.
        A path kind is always :attr:`paired` (the registry refuses one that is not).
        """
        ...

    @property
    def paired(self) -> bool:
        """Whether each canary of this kind goes out with a text control beside it.

        The scheduler sends the control at the same moment, priority and
        engine, and the ledger keeps it beside the result for the verdict
        (a path hang; a correctness check that failed while its control
        passed). An unpaired kind's canaries go out alone.
        """
        ...

    @property
    def idle_gated(self) -> bool:
        """Whether real traffic stands in for this kind's canaries.

        An idle-gated kind is skipped once startup passed while real work
        recently proved the engine alive, and under data parallelism goes to
        every engine not so proven, at once. Any other kind runs on its own
        cadence whatever the traffic, to one engine in turn.
        """
        ...

    @property
    def unsupported_skipped(self) -> bool:
        """Whether an UNSUPPORTED answer means the model lacks this input altogether.

        A text-only model asked for an image is no broken server: ``sentinel
        probe`` reports such a canary as skipped rather than failed.
        """
        ...

    @property
    def traffic_counter(self) -> str | None:
        """The sampled counter that real traffic on this path moves (None: the server has none).

        Read from the target's ``/metrics`` (a key of
        :data:`sentinel.evidence.metrics.COUNTER_SAMPLES`); each canary of the
        kind moves it by one. Real requests on the path moving it beyond
        sentinel's own canaries vouch for the path, as idle gating does for
        text: a canary queued behind them is slow, not hung.
        """
        ...

    @property
    def defaults(self) -> KindDefaults: ...

    @property
    def spec_fields(self) -> frozenset[str]:
        """Kind fields (``spec.KIND_FIELDS``) this kind requires; no other kind accepts them."""
        ...

    @property
    def endpoints(self) -> frozenset[str]:
        """The endpoints this kind can exercise."""
        ...

    def load_fields(self, given: Mapping[str, Any], assets: Traversable) -> Mapping[str, Any]:
        """Check this kind's own spec fields and return their :class:`CanarySpec` values.

        ``given`` holds exactly :attr:`spec_fields` (the catalog checked that);
        ``assets`` is the catalog directory, for files the spec names. Raises
        :class:`~sentinel.canary.spec.SpecFieldError` naming the field.
        """
        ...

    def build(self, spec: CanarySpec, *, model: str, nonce: str) -> CanaryRequest:
        """The request body for one run; ``nonce`` makes it unique past vLLM's caches."""
        ...

    def judge(
        self, sent: CanaryRequest, reply: Reply, *, baseline_prompt_tokens: int | None
    ) -> Judgement:
        """Whether the reply proves the path works."""
        ...

    def rejection(self, status: int, message: str) -> Reason | None:
        """A kind-specific reading of an error answer (None: a plain HTTP_STATUS)."""
        ...

    def unvalidatable(self, spec: CanarySpec, facts: ServerFacts) -> str | None:
        """Why ``spec`` cannot be validated on a server with these facts (None: it can).

        A kind that returns a reason is disabled with a warning instead of
        failing (and blocking startup) on a server where its replies prove
        nothing. ``spec.reasoning == "keep"`` is the operator's override.
        """
        ...


class KindBase:
    """The traits and answers most kinds give alike; a kind declares only where it differs.

    One home for the defaults the kinds used to repeat line for line: not a
    path kind and not paired (:class:`PathKind` is both), not idle-gated,
    UNSUPPORTED a failure rather than a skip, no traffic counter, no spec
    fields of its own, the template body sent as it is, every error answer a
    plain HTTP_STATUS, and validatable on every server. A kind still declares
    its ``kind``, ``defaults``, ``endpoints`` and :meth:`judge`: no default
    could say what proves its path works.
    """

    path: bool = False
    paired: bool = False
    idle_gated: bool = False
    unsupported_skipped: bool = False
    traffic_counter: str | None = None
    spec_fields: frozenset[str] = frozenset()

    def load_fields(self, given: Mapping[str, Any], assets: Traversable) -> Mapping[str, Any]:
        return {}

    def build(self, spec: CanarySpec, *, model: str, nonce: str) -> CanaryRequest:
        return CanaryRequest(body=base_body(spec, model=model, nonce=nonce), nonce=nonce)

    def rejection(self, status: int, message: str) -> Reason | None:
        return None

    def unvalidatable(self, spec: CanarySpec, facts: ServerFacts) -> str | None:
        return None


class PathKind(KindBase):
    """A kind that tests one path of the server against the text control sent beside it.

    Paired because it is a path kind: its misses mean a path hang only while
    the control beside them succeeds (the registry refuses a path kind that
    is not paired).
    """

    path = True
    paired = True


def base_body(spec: CanarySpec, *, model: str, nonce: str) -> dict[str, Any]:
    """The template body with the fields sentinel owns filled in.

    ``priority`` is always sent: vLLM honours it under ``--scheduling-policy
    priority`` and ignores it otherwise, and a canary that lost the queue to
    real traffic could kill a healthy, busy server. ``user`` carries the nonce
    (:data:`NONCE_FIELD`); a chat body asks for no thinking (:data:`NO_THINKING`)
    unless its template names ``enable_thinking`` itself.
    """
    body: dict[str, Any] = copy.deepcopy(dict(spec.request))
    body.setdefault("model", model)
    body[NONCE_FIELD] = NONCE_PREFIX + nonce
    if spec.endpoint == CHAT_ENDPOINT:
        body["chat_template_kwargs"] = {**NO_THINKING, **body.get("chat_template_kwargs", {})}
    body["priority"] = spec.priority
    body["stream"] = spec.stream
    if spec.stream:
        # vLLM sends usage in a stream only when asked; the multimodal check needs it.
        body["stream_options"] = {"include_usage": True}
    return body
