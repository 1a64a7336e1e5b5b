"""Progress: turns successive ``/metrics`` samples into "did the engine complete work?".

Pure bookkeeping (no I/O, no clock): the daemon feeds it metric samples and
the canaries it sends and finishes, and reads back when real progress was last
seen, when the last *real* (not sentinel's own) completion happened, and
whether the server restarted (every work counter went down together).

Progress is completed work, never motion: generated tokens, successful
completions, prompt tokens prefilled and tokens processed by engine steps
(the sum of vLLM's ``vllm:iteration_tokens_total``, not its step count: a step
that processed no token is no work).
Gauges (running, waiting, KV cache) move when clients arrive, give up or
abort, and preemptions are work undone, so neither ever counts. A counter that
is absent is no evidence, never "flat": only counters present in both samples
are compared.

Sentinel's own canaries are discounted at all times, not only on an idle
server: each canary in flight (and each for a short while after it finished,
since ``/metrics`` lags the reply) holds a *credit* per counter (the most
work it can cause: its prompt, its whole reply, the tokens its steps
process, its completion, and any side request it made), and every counter
delta is first charged against those credits. A hung engine usually has
stuck real requests in ``running``; the prefill, first token or decode of a
canary sent to it is charged to the canary and cannot keep it alive. Once a
canary finished, its credit becomes the work its usage reports, and what it
had charged beyond that is given back (:func:`~sentinel.canary.credit.refund`):
real work counted a sample late, never sentinel's own counted as real. With
no client at all, real progress is exactly zero.

Decode is the progress new arrivals cannot fake: where the server counts
first tokens (vLLM's ``vllm:time_to_first_token_seconds`` count) the tracker
derives ``decode_tokens`` and follows *decode progress* apart from the rest.
Under data parallelism each engine's counters (its ``engine`` label) are
followed as well as their sum (:class:`EngineTrack`), with the same two
rules per engine. A prompt prefilled in chunks moves no counter at all; its
KV-cache highs are followed by :mod:`sentinel.progress.prefill`. The reasoning behind
each rule is in ``docs/design.md`` ("Verdict semantics").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sentinel.canary.credit import Credit, discount, refund
from sentinel.canary.result import CanaryResult
from sentinel.evidence.metrics import MetricsSample
from sentinel.progress.own import canary_budget as canary_budget
from sentinel.progress.own import in_flight, settle
from sentinel.progress.prefill import PrefillWatch
from sentinel.progress.work import (
    DECODE_TOKENS,
    RAW_COUNTERS,
    decode_moved,
    work_counters,
)

DECODE_TOLD = (
    "told apart: generated tokens beyond each request's first token, less sentinel's own, "
    "vouch for the engine; first tokens and one-token completions do not"
)
DECODE_UNTOLD = (
    "cannot tell decode from first tokens (no first-token count in the exposition): any "
    "work beyond sentinel's own vouches, and the hang window judges the canaries"
)

STEP_COUNTER = "engine_tokens"  # tokens processed by engine steps: their steps visible

RECENT = 5.0
"""Seconds a finished canary keeps its credit: ``/metrics`` may show its work a sample late."""


@dataclass(slots=True)
class EngineTrack:
    """One engine's work counters (its ``engine`` label) across samples of this epoch.

    Its progress is what remains after the credits of sentinel's canaries
    that could have gone to it; its decode progress, where it counts first
    tokens, is the part that vouches for it (see the module docstring).
    """

    first_seen_at: float  # the first sample that carried this engine
    counters: dict[str, float]
    last_progress_at: float | None = None  # its work moved beyond sentinel's own
    last_decode_at: float | None = None  # its decoded tokens or completions did
    last_delta: dict[str, float] = field(default_factory=dict)  # as counted
    last_own: dict[str, float] = field(default_factory=dict)  # of that, sentinel's canaries
    totals: dict[str, float] = field(default_factory=dict)  # as counted, this epoch
    prefill: PrefillWatch = field(default_factory=PrefillWatch)  # its KV-cache highs

    @property
    def decode_available(self) -> bool:
        """Whether its last sample told decoded tokens from first tokens."""
        return DECODE_TOKENS in self.counters

    @property
    def vouched_at(self) -> float | None:
        """When its work last vouched for it: decode progress where told apart, else any."""
        return self.last_decode_at if self.decode_available else self.last_progress_at

    def observe(
        self, engine: str, counters: Mapping[str, float], at: float, credits: Sequence[Credit]
    ) -> None:
        work = work_counters(counters)
        deltas = {k: max(work[k] - self.counters[k], 0.0) for k in work if k in self.counters}
        self.counters, self.last_delta = work, deltas
        self.last_own = {
            k: discount(credits, k, d, engine) - refund(credits, k, engine)
            for k, d in deltas.items()
        }
        for key, delta in deltas.items():
            self.totals[key] = self.totals.get(key, 0.0) + delta
        real = {k for k, d in deltas.items() if d - self.last_own[k] > 0}
        if real:
            self.last_progress_at = at
        if decode_moved(real, work):
            self.last_decode_at = at


@dataclass(frozen=True, slots=True)
class SignalReport:
    """One work counter across the last two samples, for ``/status``."""

    delta: float = 0.0  # what the counter moved by
    discounted: float = 0.0  # how much of that sentinel's canaries explain
    real: float = 0.0  # what remains: progress


@dataclass(frozen=True, slots=True)
class ProgressUpdate:
    """What one new sample told."""

    progressed: bool = False
    real_completions: float = 0.0
    restarted: bool = False  # every work counter went down: the server restarted
    changed: tuple[str, ...] = ()  # the work counters that moved beyond sentinel's own
    signals: Mapping[str, SignalReport] = field(default_factory=dict)


class ProgressTracker:
    """Follows the work counters across samples, minus sentinel's own canaries."""

    def __init__(self) -> None:
        self._previous: MetricsSample | None = None
        self._credits: dict[int, Credit] = {}
        self.last_progress_at: float | None = None
        self.last_decode_at: float | None = None  # decoded tokens or completions, not our own
        self.last_real_completion_at: float | None = None
        self.last_sample_at: float | None = None
        self.last_evidence_at: float | None = None  # last sample that carried a work counter
        # A counter moved beyond sentinel's own work (verdict.still, frozen): a
        # step that only served a canary of sentinel's proves nothing for it.
        self.last_step_at: float | None = None
        self.last_beat_at: float | None = None  # any counter moved, own work too: a heartbeat
        self.signals: tuple[str, ...] = ()
        self.last_update = ProgressUpdate()
        self.totals: dict[str, SignalReport] = {}  # summed over the epoch
        self.engines: dict[str, EngineTrack] = {}  # per ``engine`` label, this epoch
        self.prefill = PrefillWatch()  # KV-cache highs: a prompt prefilled in chunks

    @property
    def last_prefill_at(self) -> float | None:
        """The last sample in which a prompt being prefilled set a new KV-cache high."""
        return self.prefill.last_at

    def reset(self) -> None:
        """Forget the samples (a new server epoch); canaries in flight keep their credit."""
        self._previous = None
        self.last_progress_at = None
        self.last_decode_at = None
        self.last_real_completion_at = None
        self.last_sample_at = None
        self.last_evidence_at = None
        self.last_step_at = None
        self.last_beat_at = None
        self.signals = ()
        self.last_update = ProgressUpdate()
        self.totals = {}
        self.engines = {}
        self.prefill.reset()

    @property
    def available(self) -> bool:
        """Whether the last sample carried any work counter at all."""
        return bool(self.signals)

    @property
    def decode_available(self) -> bool:
        """Whether the last sample told decoded tokens from first tokens."""
        return DECODE_TOKENS in self.signals

    @property
    def gauges(self) -> Mapping[str, float]:
        """The last sample's gauges (motion, never progress)."""
        return {} if self._previous is None else self._previous.gauges

    def canary_sent(
        self, token: int, now: float, budget: Mapping[str, float], engine: int | None = None
    ) -> None:
        """A canary left: while in flight it explains the most it can cause (``budget``).

        Its whole reply, decoded tokens included: a canary's tokens past its
        first, seen in a sample while it still runs, are sentinel's decode, not
        the engine vouching for real requests (left uncredited, a no-client
        server showed "real" decode whenever a scrape fell inside a canary).
        What that hides of a busy server's real work (at most one canary's
        reply) is given back once its usage says what it did cause
        (:func:`~sentinel.canary.credit.refund`), so it is late, not lost; a
        hung engine's real requests never decode, so nothing is hidden there.
        ``engine``: the data-parallel engine it is aimed at, the only one whose
        work it explains (None: unaimed, any one engine's).
        """
        allowed, side = in_flight(budget)
        label = None if engine is None else str(engine)
        self._credits[token] = Credit(
            sent=now,
            allowed=allowed,
            engine=label,
            requests=max(float(budget.get("completions", 0.0)), 1.0),
            side=side,
        )

    def own_requests(self, sample: MetricsSample) -> float:
        """sentinel's requests the gauges of ``sample`` may show.

        Per canary its engine requests (a correctness canary's prompt list is
        three) and, while it runs, its side request: counted as canaries, one
        correctness canary read as two real requests running. One that ended
        while the scrape was under way counts: its gauges may be older.
        """
        begun = sample.at if sample.read_from is None else sample.read_from
        return sum(
            c.requests + (c.side.get("completions", 0.0) if c.finished is None else 0.0)
            for c in self._credits.values()
            if c.sent <= sample.at and (c.finished is None or c.finished >= begun)
        )

    def canary_finished(self, token: int, result: CanaryResult | None, now: float) -> None:
        """A canary ended: its credit shrinks to what its usage reports, then expires.

        ``result`` is None for a canary abandoned without a result (cancelled):
        whatever it caused is still discounted for a while.
        """
        credit = self._credits.get(token)
        if credit is None:
            return
        credit.finished = now
        if result is None:
            return
        settle(credit, result)

    def observe(self, sample: MetricsSample) -> ProgressUpdate:
        """Compare ``sample`` with the previous one; what remains after credits is progress."""
        previous, self._previous = self._previous, sample
        self.last_sample_at = sample.at
        present = work_counters(sample.counters)
        self.signals = tuple(sorted(present))
        if present:
            self.last_evidence_at = sample.at
        if previous is None:
            self._follow_engines(sample, ())
            self._expire(sample.at)
            return self._remember(ProgressUpdate())
        before = work_counters(previous.counters)
        common = [k for k in present if k in before]
        # Only exposed counters tell a restart: the derived decode count of a
        # server that never decoded stays 0 across one.
        exposed = [k for k in common if k in RAW_COUNTERS]
        if exposed and all(present[k] < before[k] for k in exposed):
            self.last_progress_at = None
            self.last_decode_at = None
            self.last_real_completion_at = None
            self.last_step_at = None
            self.last_beat_at = None
            self.totals = {}
            self.engines = {}
            self._follow_engines(sample, ())
            return self._remember(ProgressUpdate(restarted=True))

        credits = [
            c
            for c in sorted(self._credits.values(), key=lambda c: c.sent)
            if c.sent <= sample.at and (c.finished is None or c.finished + RECENT > previous.at)
        ]
        self._follow_engines(sample, credits)
        reports: dict[str, SignalReport] = {}
        for key in common:
            delta = max(present[key] - before[key], 0.0)  # one counter reset alone: no work
            # Charged now, less what finished canaries had charged beyond their usage.
            discounted = discount(credits, key, delta) - refund(credits, key)
            reports[key] = SignalReport(delta, discounted, delta - discounted)
        if any(reports[k].delta > 0 for k in exposed):
            self.last_beat_at = sample.at
        if any(reports[k].real > 0 for k in exposed):
            self.last_step_at = sample.at  # a step beyond sentinel's own canaries
        self._expire(sample.at)
        changed = tuple(sorted(k for k, r in reports.items() if r.real > 0))
        real_completions = reports["completions"].real if "completions" in reports else 0.0
        if changed:
            self.last_progress_at = sample.at
        if decode_moved(changed, present):
            self.last_decode_at = sample.at
        if real_completions > 0:
            self.last_real_completion_at = sample.at
        canaries = sum(1 for c in self._credits.values() if c.finished is None)
        self.prefill.observe(sample.gauges, sample.at, canaries=canaries, progressed=bool(changed))
        for engine, track in self.engines.items():
            gauges = sample.engine_gauges.get(engine, {})
            moved = track.last_progress_at == sample.at
            track.prefill.observe(gauges, sample.at, canaries=canaries, progressed=moved)
        for key, report in reports.items():
            total = self.totals.get(key, SignalReport())
            self.totals[key] = SignalReport(
                total.delta + report.delta,
                total.discounted + report.discounted,
                total.real + report.real,
            )
        return self._remember(
            ProgressUpdate(
                progressed=bool(changed),
                real_completions=real_completions,
                changed=changed,
                signals=reports,
            )
        )

    def _follow_engines(self, sample: MetricsSample, credits: Sequence[Credit]) -> None:
        """Each engine's own work beyond ``credits``; an engine no longer exposed is forgotten."""
        for engine, counters in sample.engines.items():
            track = self.engines.get(engine)
            if track is None:
                self.engines[engine] = EngineTrack(sample.at, work_counters(counters))
            else:
                track.observe(engine, counters, sample.at, credits)
        for engine in [e for e in self.engines if e not in sample.engines]:
            del self.engines[engine]

    def _remember(self, update: ProgressUpdate) -> ProgressUpdate:
        self.last_update = update
        return update

    def _expire(self, now: float) -> None:
        """Drop credits of canaries finished long enough ago that their work has shown."""
        gone = [
            t
            for t, c in self._credits.items()
            if c.finished is not None and c.finished + RECENT <= now
        ]
        for token in gone:
            del self._credits[token]

    def report(self, now: float) -> dict[str, object]:
        """What moved and how much was sentinel's own, for ``/status``."""
        last = self.last_update
        return {
            "signals": list(self.signals),
            "moved": sorted(last.changed),
            # Whether decode is told apart, and since when it has been flat:
            # the engine-hang rule asks for decode progress where it can.
            "decode_evidence": self.decode_available,
            "decode": DECODE_TOLD if self.decode_available else DECODE_UNTOLD,
            "decode_age": _age(now, self.last_decode_at),
            "last_interval": {
                k: {"delta": r.delta, "own": r.discounted, "progress": r.real}
                for k, r in sorted(last.signals.items())
            },
            "epoch_totals": {
                k: {"delta": r.delta, "own": r.discounted, "progress": r.real}
                for k, r in sorted(self.totals.items())
            },
            "canaries_discounted": len(self._credits),
            # Per engine (vLLM's ``engine`` label): its work as counted, how much
            # of it sentinel's canaries explain, and since when what remains
            # (its decode, where told apart) has been flat.
            "engines": {
                engine: {
                    "progress_age": _age(now, track.last_progress_at),
                    "decode_evidence": track.decode_available,
                    "decode_age": _age(now, track.last_decode_at),
                    "seen_for": round(now - track.first_seen_at, 3),
                    "last_interval": dict(sorted(track.last_delta.items())),
                    "last_own": dict(sorted(track.last_own.items())),
                    "epoch_totals": dict(sorted(track.totals.items())),
                }
                for engine, track in sorted(self.engines.items(), key=lambda i: _order(i[0]))
            },
        }


def _age(now: float, at: float | None) -> float | None:
    return None if at is None else round(now - at, 3)


def _order(engine: str) -> tuple[int, str]:
    """Engine labels in numeric order ("2" before "10"), anything else after."""
    return (int(engine), "") if engine.isdigit() else (1 << 30, engine)
