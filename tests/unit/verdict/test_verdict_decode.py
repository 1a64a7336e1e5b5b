"""Decode progress, end to end on a virtual clock: a server model, the tracker and the engine rule.

A server whose decode is stuck still prefills every new arrival (and may hand
each its first token), so while other clients keep arriving its prompt,
generation and engine-step counters never stay flat. Where first tokens are
counted (vLLM's ``vllm:time_to_first_token_seconds_count``), only decoded
tokens and completions vouch for the engine. These cases drive a small
step-by-step server (vLLM V1's accounting: a prefill's prompt tokens and its
first token are counted at the step that finishes it) with sentinel's shipped
timings (scrape every 2 s, a text canary every 5 s with an 8 s deadline,
H = 15 s), and hold the rule to both sides: the two hidden hang shapes go red
with traffic arriving every second, and no slow, saturated, prefilling or
idle healthy server ever does, with or without the first-token count.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import pytest

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind
from sentinel.evidence.metrics import MetricsSample
from sentinel.progress.tracker import ProgressTracker, canary_budget
from sentinel.verdict import Evidence, HangKind, KindEvidence, Policy
from sentinel.verdict.hangs.engine import engine_hang

TEXT = CanaryKind.TEXT
TICK = 0.05  # the virtual clock's resolution
SCRAPE, CANARY_EVERY, DEADLINE = 2.0, 5.0, 8.0  # the shipped defaults
CANARY_PROMPT, CANARY_TOKENS = 8, 2


@dataclass
class Request:
    prompt: int
    max_tokens: int
    prefill_steps: int = 1  # steps until its prefill completes (chunked prefill: more)
    give_up_at: float = float("inf")  # the client aborts then
    canary: int | None = None  # sentinel's send token
    sent: float = 0.0
    generated: int = 0
    first_token_at: float | None = None


@dataclass
class Server:
    """An engine that steps every ``token_s`` seconds over its running requests.

    ``decode`` False is the ``prefill_no_decode`` shape (prompts prefilled, no
    token ever sampled), ``stall_after`` 1 the ``stall_after_first`` one.
    """

    token_s: float = 0.05
    max_seqs: int = 8
    decode: bool = True
    stall_after: int | None = None
    first_tokens_counted: bool = True
    running: list[Request] = field(default_factory=list)
    waiting: list[Request] = field(default_factory=list)
    counters: dict[str, float] = field(
        default_factory=lambda: dict.fromkeys(
            ("generation_tokens", "prompt_tokens", "engine_tokens", "completions", "first_tokens"),
            0.0,
        )
    )
    next_step: float = 0.0
    done: list[Request] = field(default_factory=list)

    def submit(self, request: Request) -> None:
        self.waiting.append(request)

    def abort(self, request: Request) -> None:
        for queue in (self.running, self.waiting):
            if request in queue:
                queue.remove(request)

    def tick(self, now: float) -> None:
        for r in [r for r in (*self.running, *self.waiting) if r.give_up_at <= now]:
            self.abort(r)
        if now < self.next_step:
            return
        self.next_step = now + self.token_s
        while self.waiting and len(self.running) < self.max_seqs:
            self.running.append(self.waiting.pop(0))
        c = self.counters
        for r in list(self.running):
            if r.prefill_steps > 0:
                r.prefill_steps -= 1
                if r.prefill_steps == 0:
                    c["prompt_tokens"] += r.prompt
                    c["engine_tokens"] += r.prompt
                    if self.decode:  # the prefill samples the first token
                        self._emit(r, now, first=True)
            elif self.decode and (self.stall_after is None or r.generated < self.stall_after):
                self._emit(r, now, first=False)

    def _emit(self, r: Request, now: float, *, first: bool) -> None:
        c = self.counters
        c["generation_tokens"] += 1
        c["engine_tokens"] += 1
        if first:
            c["first_tokens"] += 1
            r.first_token_at = now
        r.generated += 1
        if r.generated >= r.max_tokens:
            c["completions"] += 1
            self.running.remove(r)
            self.done.append(r)

    def sample(self, now: float) -> MetricsSample:
        counters = dict(self.counters)
        if not self.first_tokens_counted:
            del counters["first_tokens"]
        return MetricsSample(at=now, counters=counters)


@dataclass
class Traffic:
    """Other clients: a request every ``every`` seconds, each given up after ``patience``."""

    every: float | None = None
    prompt: int = 20
    max_tokens: int = 64
    patience: float = 10.0
    prefill_steps: int = 1
    preload: int = 0  # long requests running before the run starts
    preload_tokens: int = 100_000


def run(server: Server, traffic: Traffic, seconds: float = 120.0) -> float | None:
    """Drive the server, sentinel's canaries and the engine rule; when the hang was confirmed."""
    tracker = ProgressTracker()
    results: list[CanaryResult] = []
    outstanding: dict[int, Request] = {}
    token = 0
    next_arrival = 0.0
    next_canary = 1.0
    next_scrape = 0.0
    for _ in range(traffic.preload):
        long = Request(prompt=traffic.prompt, max_tokens=traffic.preload_tokens)
        server.submit(long)
    steps = round(seconds / TICK)
    for i in range(steps + 1):
        now = i * TICK
        if traffic.every is not None and now >= next_arrival:
            next_arrival += traffic.every
            server.submit(
                Request(
                    traffic.prompt,
                    traffic.max_tokens,
                    prefill_steps=traffic.prefill_steps,
                    give_up_at=now + traffic.patience,
                )
            )
        if not outstanding and now >= next_canary:
            token += 1
            canary = Request(CANARY_PROMPT, CANARY_TOKENS, canary=token, sent=now)
            outstanding[token] = canary
            tracker.canary_sent(
                token, now, canary_budget(reply_tokens=CANARY_TOKENS, prompt_tokens=CANARY_PROMPT)
            )
            server.submit(canary)
        server.tick(now)
        for t, canary in list(outstanding.items()):
            answered = canary in server.done
            if not answered and now - canary.sent < DEADLINE:
                continue
            del outstanding[t]
            next_canary = now + CANARY_EVERY
            if answered:
                res = CanaryResult(
                    "text", TEXT, Reason.OK, canary.sent, now - canary.sent,
                    prompt_tokens=CANARY_PROMPT, completion_tokens=CANARY_TOKENS,
                )  # fmt: skip
            else:
                server.abort(canary)
                res = CanaryResult("text", TEXT, Reason.TIMEOUT, canary.sent, DEADLINE)
            results.append(res)
            tracker.canary_finished(t, res, now)
        if now >= next_scrape:
            next_scrape += SCRAPE
            tracker.observe(server.sample(now))
        evidence = Evidence(
            kinds={
                TEXT: KindEvidence(
                    TEXT,
                    results=tuple(results),
                    outstanding=tuple(c.sent for c in outstanding.values()),
                )
            },
            progress_available=tracker.available,
            last_progress_at=tracker.last_progress_at,
            decode_available=tracker.decode_available,
            last_decode_at=tracker.last_decode_at,
            last_evidence_at=tracker.last_evidence_at,
        )
        hang = engine_hang(evidence, Policy(), now)
        if hang is not None:
            assert hang.kind is HangKind.ENGINE
            return now
    return None


ARRIVING = Traffic(every=1.0)

HUNG = [
    pytest.param(Server(decode=False), ARRIVING, id="prefill-no-decode-with-arrivals"),
    pytest.param(Server(stall_after=1), ARRIVING, id="stall-after-first-with-arrivals"),
    pytest.param(Server(decode=False), Traffic(), id="prefill-no-decode-alone"),
    pytest.param(Server(stall_after=1), Traffic(), id="stall-after-first-alone"),
    # Stuck requests already running, one token each, and arrivals on top.
    pytest.param(Server(stall_after=1), Traffic(every=1.0, preload=3), id="stuck-and-arrivals"),
]


@pytest.mark.parametrize(("server", "traffic"), HUNG)
def test_a_server_that_never_decodes_is_hung_whoever_arrives(
    server: Server, traffic: Traffic
) -> None:
    confirmed = run(copy.deepcopy(server), traffic, seconds=60.0)
    # The first canary is sent at 1 s; H = 15 s, plus one scrape and a canary cycle of slack.
    assert confirmed is not None, "never confirmed"
    assert confirmed <= 1.0 + 15.0 + SCRAPE + CANARY_EVERY + DEADLINE


def test_under_arrivals_only_the_first_token_count_reveals_stuck_decode() -> None:
    # What the first-token count buys: the same hung shape under arrivals is
    # invisible to prefill and first-token progress, visible to decode progress.
    blind = Server(stall_after=1, first_tokens_counted=False)
    assert run(blind, ARRIVING, seconds=60.0) is None
    assert run(Server(stall_after=1), ARRIVING, seconds=60.0) is not None


HEALTHY = [
    # 2 s per token: every running request still decodes a token each step.
    pytest.param(Server(token_s=2.0), Traffic(), id="slow-decode-2s-alone"),
    pytest.param(
        Server(token_s=2.0),
        Traffic(every=3.0, max_tokens=16, patience=60),
        id="slow-decode-2s-busy",
    ),
    # Saturated FCFS: every seat taken by long requests, canaries queue past
    # their deadline behind arrivals, decode continues for the running ones.
    pytest.param(
        Server(max_seqs=4),
        Traffic(every=1.0, max_tokens=2000, patience=1000, preload=4),
        id="saturated",
    ),
    # Saturated by short requests that end at their first token: completions vouch.
    pytest.param(
        Server(max_seqs=2, token_s=0.5),
        Traffic(every=0.2, max_tokens=1, patience=1000, preload=2, preload_tokens=1),
        id="saturated-first-token-only",
    ),
    # A 30 s chunked prefill beside decoding requests; canaries get in.
    pytest.param(
        Server(),
        Traffic(every=10.0, prefill_steps=600, max_tokens=8, patience=1000, preload=2),
        id="long-chunked-prefill",
    ),
    pytest.param(
        Server(),
        Traffic(every=40.0, prefill_steps=600, max_tokens=8, patience=1000),
        id="long-chunked-prefill-alone",
    ),
    # Idle: canaries answered, nothing else; no canary unanswered, no hang.
    pytest.param(Server(), Traffic(), id="idle"),
]


@pytest.mark.parametrize("first_tokens", [True, False], ids=["first-tokens", "no-ttft-count"])
@pytest.mark.parametrize(("server", "traffic"), HEALTHY)
def test_a_slow_or_busy_healthy_server_is_never_hung(
    server: Server, traffic: Traffic, first_tokens: bool
) -> None:
    server = copy.deepcopy(server)  # a parameter is shared by every run that uses it
    server.first_tokens_counted = first_tokens
    assert run(server, traffic) is None


def test_the_saturated_case_does_make_canaries_miss() -> None:
    # The saturated case would prove nothing if its canaries were answered.
    server = Server(max_seqs=4)
    traffic = Traffic(every=1.0, max_tokens=2000, patience=1000, preload=4)
    run(server, traffic, seconds=30.0)
    assert not any(r.canary is not None for r in server.done)


def test_a_canarys_own_decode_in_flight_is_never_real_decode() -> None:
    # Alone on a server at 2 s per token, the canary's second token is
    # sentinel's own decode, in flight or not: its answer vouches, not its
    # tokens (counted as real, a server with no client "decoded" and a dead
    # decode loop behind a canary's second token stayed excused).
    tracker = ProgressTracker()
    tracker.observe(MetricsSample(0.0, {"generation_tokens": 0, "first_tokens": 0}))
    tracker.canary_sent(1, 0.5, canary_budget(reply_tokens=2, prompt_tokens=8))
    tracker.observe(MetricsSample(2.0, {"generation_tokens": 1, "first_tokens": 1}))
    assert tracker.last_decode_at is None  # its first token is no decode
    tracker.observe(MetricsSample(4.0, {"generation_tokens": 2, "first_tokens": 1}))
    assert tracker.last_decode_at is None  # nor its second
    done = CanaryResult("text", TEXT, Reason.OK, 0.5, 4.0, prompt_tokens=8, completion_tokens=2)
    tracker.canary_finished(1, done, 4.5)
    tracker.observe(MetricsSample(6.0, {"generation_tokens": 2, "first_tokens": 1}))
    assert tracker.last_decode_at is None  # nothing given back: it was all its own
    assert tracker.totals["decode_tokens"].real == 0


def test_a_finished_canarys_decoded_tokens_are_discounted() -> None:
    tracker = ProgressTracker()
    tracker.observe(MetricsSample(0.0, {"generation_tokens": 0, "first_tokens": 0}))
    tracker.canary_sent(1, 0.5, canary_budget(reply_tokens=4, prompt_tokens=8))
    done = CanaryResult("text", TEXT, Reason.OK, 0.5, 0.5, prompt_tokens=8, completion_tokens=4)
    tracker.canary_finished(1, done, 1.0)
    update = tracker.observe(MetricsSample(2.0, {"generation_tokens": 4, "first_tokens": 1}))
    assert update.signals["decode_tokens"].discounted == 3
    assert tracker.last_decode_at is None


def test_a_restart_is_told_by_the_exposed_counters_even_when_nothing_was_ever_decoded() -> None:
    tracker = ProgressTracker()
    tracker.observe(MetricsSample(0.0, {"generation_tokens": 5, "first_tokens": 5}))
    assert tracker.observe(
        MetricsSample(2.0, {"generation_tokens": 0, "first_tokens": 0})
    ).restarted


def test_decode_is_no_evidence_without_a_first_token_count() -> None:
    tracker = ProgressTracker()
    tracker.observe(MetricsSample(0.0, {"generation_tokens": 5}))
    assert not tracker.decode_available
    tracker.observe(MetricsSample(2.0, {"generation_tokens": 5, "first_tokens": 5}))
    assert tracker.decode_available
