"""What the exporter remembers between probes of a target, bounded, and progress from it.

Per target (its base URL): the work the exporter's own canaries gave it, in
total, and per module the work counters of that module's previous probe.
Progress of one probe is the target's real work counters (completions with a
stop or length finish, generation tokens) having moved since the previous
probe of the same target and module by more than the exporter's own canaries
sent in between explain. A probe reads ``/metrics`` before it sends its
canaries, so its own canaries show in the *next* probe's counters, where
their recorded share is subtracted.

The store holds at most ``max_targets`` targets (the least recently probed
is dropped first) and drops a target not probed for ``idle_seconds``. Pure:
the caller passes "now", so tests run on a virtual clock.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from sentinel.canary.result import CanaryResult
from sentinel.canary.spec import CanaryKind

WORK_COUNTERS = ("completions", "generation_tokens")


@dataclass(frozen=True, slots=True)
class OwnWork:
    """Work the exporter's canaries gave a target, as the target's counters would count it."""

    completions: float = 0.0
    generation_tokens: float = 0.0

    def get(self, key: str) -> float:
        return self.completions if key == "completions" else self.generation_tokens

    def plus(self, results: Iterable[CanaryResult]) -> OwnWork:
        completions, tokens = self.completions, self.generation_tokens
        for result in results:
            work = canary_work(result)
            completions += work.completions
            tokens += work.generation_tokens
        return OwnWork(completions, tokens)


def canary_work(result: CanaryResult) -> OwnWork:
    """The completions and generated tokens one canary can explain.

    A canary that got a reply completed once and generated what its usage
    (or the streamed pieces) says; a multimodal canary with a reply also sent
    its one-token baseline without the image. A canary cut off before any
    reply explains the tokens it streamed, and no completion.
    """
    tokens = float(result.completion_tokens or result.tokens_received or 0)
    replied = result.prompt_tokens is not None or result.completion_tokens is not None
    completions = 1.0 if replied else 0.0
    if replied and result.kind == CanaryKind.MULTIMODAL:
        completions += 1.0
        tokens += 1.0
    return OwnWork(completions, tokens)


@dataclass(frozen=True, slots=True)
class ModuleTrack:
    """The previous probe of one target with one module."""

    counters: Mapping[str, float]  # the work counters its /metrics showed (present ones)
    own: OwnWork  # the target's own-work total when they were read
    moved_at: float  # when progress last moved, or the target was last seen idle


@dataclass(frozen=True, slots=True)
class Progress:
    """What one probe's ``/metrics`` says against the previous probe's."""

    moved: bool | None  # None: a first probe, or no counter present in both
    stalled_seconds: float


def progress(
    previous: ModuleTrack | None,
    counters: Mapping[str, float],
    own: OwnWork,
    busy: bool,
    now: float,
) -> tuple[Progress, ModuleTrack]:
    """Progress since ``previous``, and the track to keep for the next probe.

    ``busy``: the target reports requests running or waiting. A counter that
    went down is a restarted server: its whole value is new work. Stalled
    seconds count from the last probe that saw progress or an idle target.
    """
    work = {k: counters[k] for k in WORK_COUNTERS if k in counters}
    moved: bool | None = None
    if previous is not None:
        common = [k for k in work if k in previous.counters]
        if common:
            moved = False
            for key in common:
                old, new = previous.counters[key], work[key]
                delta = new if new < old else new - old
                own_delta = own.get(key) - previous.own.get(key)
                if delta - own_delta > 0:
                    moved = True
    anchor = now if previous is None or moved or not busy else previous.moved_at
    stalled = 0.0 if not busy or moved else max(now - anchor, 0.0)
    return Progress(moved, stalled), ModuleTrack(work, own, anchor)


@dataclass(slots=True)
class TargetState:
    last_probe_at: float
    own: OwnWork = OwnWork()
    modules: dict[str, ModuleTrack] = field(default_factory=dict)


class TargetStore:
    """Per-target state, at most ``max_targets`` of it, none idle past ``idle_seconds``."""

    def __init__(self, max_targets: int, idle_seconds: float) -> None:
        self._max = max_targets
        self._idle = idle_seconds
        self._targets: OrderedDict[str, TargetState] = OrderedDict()

    def __len__(self) -> int:
        return len(self._targets)

    def __contains__(self, key: object) -> bool:
        return key in self._targets

    def live(self, now: float) -> int:
        """Targets probed within ``idle_seconds`` of ``now`` (a read: nothing is dropped)."""
        return sum(1 for s in self._targets.values() if now - s.last_probe_at <= self._idle)

    def expire(self, now: float) -> int:
        """Drop targets idle for longer than ``idle_seconds``; how many were dropped."""
        dropped = 0
        while self._targets:
            key, state = next(iter(self._targets.items()))
            if now - state.last_probe_at <= self._idle:
                break
            del self._targets[key]
            dropped += 1
        return dropped

    def touch(self, key: str, now: float) -> TargetState:
        """The target's state (new if unknown), marked as probed now, most recent last."""
        self.expire(now)
        state = self._targets.pop(key, None)
        if state is None:
            state = TargetState(now)
        state.last_probe_at = max(state.last_probe_at, now)
        self._targets[key] = state
        while len(self._targets) > self._max:
            self._targets.popitem(last=False)
        return state
