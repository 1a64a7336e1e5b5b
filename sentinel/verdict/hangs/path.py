"""The path rule: a structured or multimodal path hung while the text controls pass.

A hang can be confined to one path (grammar compilation for structured
output, image preprocessing for multimodal input): the engine serves text,
the path's canaries make no progress of their own. Each path canary goes out
with a text control beside it; two in a row without progress while their
controls succeed is a hang of the path's own kind. Streamed, so a path at the
engine's pace is slow, not hung. Never for a path that has not worked in this
epoch (a startup failure), nor while real traffic on it gets through. A
canary stuck on a connection a stuck API-server process holds says nothing of
its path: the API-server rule names that process. The reasoning is in
docs/design.md ("Verdict semantics").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial

from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import CanaryKind
from sentinel.knob import setting
from sentinel.verdict.answers import fast_failure
from sentinel.verdict.clock import observed
from sentinel.verdict.knobs import HangWindow
from sentinel.verdict.model import Evidence, Hang, HangKind, KindEvidence
from sentinel.verdict.rule import Gate, HangRule
from sentinel.verdict.stall import floor as window_floor

# A path canary whose tokens arrive this many times slower than the text
# control's is making no progress of its own; slower-but-streaming at the
# engine's pace is a slow server, which the path rule must never fail.
PACE_FACTOR = 10.0


class PathKnobs(HangWindow):
    """The path rule's knobs (its action is each path canary kind's own policy)."""

    path_misses: int = setting(
        2, "Path hang: this many path canaries in a row without progress.", (1, 100, "canaries")
    )


def path_hangs(evidence: Evidence, policy: PathKnobs, now: float) -> Iterator[Hang]:
    """Each enabled path kind's hang, judged from where windows may start."""
    floor = window_floor(evidence)
    served = partial(served_at, evidence)
    for k in evidence.enabled:
        if k.path:
            hang = path_hang(k, floor, policy, now, evidence.unobserved, served)
            if hang is not None:
                yield hang


def served_at(evidence: Evidence, engine: int | None) -> tuple[float | None, float | None]:
    """When ``engine`` (None: the server) was last seen serving: a passed text canary's
    send, and real work.

    A text canary's start, not its end: it was sent then and came back, so the
    engine served something sent at that moment. Real work is dated by the
    sample that showed it, which may come a scrape after the work was done.
    Under data parallelism only that engine's own canaries and work count:
    another engine serving says nothing of the one the path canary waits in.
    """
    text = evidence.kinds.get(CanaryKind.TEXT)
    results = text.results if text is not None else ()
    passed = [r.started for r in results if r.ok and (engine is None or r.engine == engine)]
    work = evidence.last_progress_at
    if engine is not None:
        own = next((e for e in evidence.engines if e.engine == str(engine)), None)
        work = own.last_progress_at if own is not None else None
    return max(passed, default=None), work


def path_missed(result: CanaryResult, control: CanaryResult | None) -> bool:
    """Whether a path canary made no progress of its own while its text control succeeded.

    A path canary that streams tokens at the engine's current pace is slow,
    not hung; one that produced nothing (no first token before its deadline,
    a 5xx, a reset, an empty reply) or whose tokens came far slower than the
    control's is a miss.
    """
    if control is None or not control.ok or result.ok or result.reason is Reason.ADMISSION:
        return False
    if result.reason is not Reason.TIMEOUT:
        return fast_failure(result)
    if result.ttft is None:
        return True  # nothing arrived before the deadline
    if not result.tokens_received:
        return False  # a first token came; how many followed is unknown
    own_rate = result.tokens_received / max(result.duration - result.ttft, 1e-3)
    return own_rate * PACE_FACTOR < _rate(control)


def _rate(control: CanaryResult) -> float:
    """The control's tokens per second after its first token (0 when unknown)."""
    tokens = control.completion_tokens or control.tokens_received or 0
    decode = control.duration - (control.ttft or 0.0)
    return tokens / max(decode, 1e-3)


def path_hang(
    k: KindEvidence,
    floor: float,
    policy: PathKnobs,
    now: float,
    unobserved: tuple[tuple[float, float], ...] = (),
    served: Callable[[int | None], tuple[float | None, float | None]] | None = None,
) -> Hang | None:
    """The path's last canaries made no progress beside passing controls.

    Either the last ``path_misses`` canaries all missed, or the last one,
    still awaited for its late answer (no other canary of the kind is sent
    meanwhile), has waited ``path_misses`` hang windows: a slow path (images
    preprocessed one at a time behind real image load) answers late, and a
    late answer is an answer; and only while the engine is seen serving
    after the pair left (``served``: a text canary sent after the control
    that passed, or real work shown a hang window later). Its control passed,
    perhaps in the engine's step before the one the path canary waits in; an
    engine that served nothing since (a compile step, a long prefill, a hang
    of its own) is the engine rule's to judge, with its excuses. Never for a
    kind that has not succeeded since
    ``floor`` (a path that never worked on this server is a startup
    failure), nor for canaries sent before real traffic on the path last got
    through (``traffic_at``).
    """
    # A canary refused at vLLM's admission cap says nothing of its path: the queue
    # was full when it came (its control, a moment apart, may have found a slot).
    pairs = [
        (r, c)
        for r, c in zip(k.results, k.controls, strict=False)
        if r.started >= floor and r.reason is not Reason.ADMISSION
    ]
    if not any(r.ok for r, _ in pairs) or not pairs:
        return None
    last = pairs[-policy.path_misses :]
    newest, control = last[-1]
    if newest.awaiting_late:
        waited = observed(newest.started, now, unobserved)
        if waited < policy.path_misses * policy.hang_window or not path_missed(newest, control):
            return None
        left = max(newest.started, control.started if control is not None else 0.0)
        text_at, work_at = served(newest.engine) if served is not None else (None, None)
        since_text = text_at is not None and text_at > left
        since_work = work_at is not None and work_at > left + policy.hang_window
        if not (since_text or since_work):
            return None  # nothing served since the pair left: not the path's alone
        last = [last[-1]]
        what = f"a canary unanswered for {waited:.0f}s"
    elif len(last) < policy.path_misses or not all(path_missed(r, c) for r, c in last):
        return None
    else:
        what = f"{policy.path_misses} canaries made no progress"
    if k.traffic_at is not None and any(r.started < k.traffic_at for r, _ in last):
        return None  # real requests on the path got through after these were sent
    return Hang(
        HangKind(k.kind.value),
        k.action,
        f"{k.kind.value} path hang: {what} while text controls succeeded",
        last[0][0].started,
    )


RULE = HangRule(
    "path",
    path_hangs,
    PathKnobs,
    windows=("path_misses", "hang_window"),
    off_when=frozenset({Gate.STALLED, Gate.API_STUCK}),
    evidence="two canaries of a path kind in a row made no progress of their own while the text "
    "controls beside them succeeded",
    per_path=True,
)
