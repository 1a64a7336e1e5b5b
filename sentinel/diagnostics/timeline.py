"""The incident as a picture: ``timeline.png`` drawn from what a bundle holds.

One time axis, seconds before the capture, four panels: sentinel's answers
to the kubelet (a lane each for liveness, readiness and startup, green while
passing, red while failing, a red span labelled with the hang kinds behind
it), the canaries by kind (each a bar from its send to its answer, green when
it passed, red when it failed, the failure's reason beside the last one),
vLLM's progress as rates over the bundle's minutes of samples (generated and
prompt tokens, finished requests per second: a hang is where they fall flat;
an older bundle draws its few kept scrapes' counters instead), and its queue
gauges (running, waiting).
The capture is the vertical line at 0, labelled with its trigger and cause;
the restart is a dashed red line where liveness turned red to ask the kubelet
for it, labelled with the hang kinds (the capture is taken before the kubelet
acts on it, so its kill is not in the bundle).

The time axis spans the canaries and samples (and any restart ask), at most
the samples' window (:data:`sentinel.diagnostics.window.WINDOW_S`); an
answer that flipped long before (startup passed an hour ago) is drawn from
the axis's left edge, so old history never squeezes the incident.

Drawn only from the redacted bundle, never from live state, so the picture
shows nothing the bundle does not. Drawn in the capture's child process or by
``sentinel diagnose``, never in the daemon (matplotlib's memory would stay in
its resident set). matplotlib is optional (the ``timeline`` extra): where it is
not installed, :func:`draw` returns None and says why.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from sentinel.diagnostics import window

TIMELINE_FILE = "timeline.png"
# The counters and gauges drawn, vLLM's names (each summed over its label sets).
PROGRESS = {
    "vllm:generation_tokens": "generated tokens",
    "vllm:prompt_tokens": "prompt tokens",
    "vllm:request_success": "finished requests",
}
GAUGES = {"vllm:num_requests_running": "running", "vllm:num_requests_waiting": "waiting"}
# Where each drawn metric sits in a bundle's samples (sentinel.diagnostics.window).
SAMPLED = {
    "vllm:generation_tokens": ("counters", "generation_tokens"),
    "vllm:prompt_tokens": ("counters", "prompt_tokens"),
    "vllm:request_success": ("counters", "completions"),
    "vllm:num_requests_running": ("gauges", "running"),
    "vllm:num_requests_waiting": ("gauges", "waiting"),
}
PROBES = ("liveness", "readiness", "startup")  # the answers' lanes, top to bottom
ANSWERS_TITLE = "probe answers (green passing, red failing)"
RESTART_LABEL = "restart asked"
WIDTH_IN, HEIGHT_IN, DPI = 10.0, 8.5, 100
# An answer's span, seconds before the capture: (from, to, ok, the hang kinds behind it).
Span = tuple[float, float, bool, str]


def series(bundle: Mapping[str, Any]) -> dict[str, list[tuple[float, float]]]:
    """Each drawn metric as (seconds before the capture, value), from the kept scrapes."""
    anchor = _wall_anchor(bundle)
    out: dict[str, list[tuple[float, float]]] = {}
    for scrape in bundle.get("metrics") or []:
        try:
            at = datetime.fromisoformat(str(scrape["at"])).timestamp() - anchor
            families = list(text_string_to_metric_families(str(scrape["text"])))
        except (KeyError, ValueError, TypeError):
            continue  # a cut or foreign text: that scrape draws nothing
        sums: dict[str, float] = {}
        for family in families:
            for sample in family.samples:
                # A counter's samples end in _total whatever its family is called.
                name = sample.name.removesuffix("_total")
                drawn = name in PROGRESS or name in GAUGES
                if drawn and math.isfinite(sample.value):
                    sums[name] = sums.get(name, 0.0) + sample.value
        for name, value in sums.items():
            out.setdefault(name, []).append((at, value))
    return out


def sampled(bundle: Mapping[str, Any]) -> dict[str, list[tuple[float, float]]]:
    """The bundle's minutes of samples, seconds before the capture: work as rates, and gauges.

    Keyed by vLLM's names, like :func:`series`; empty for a bundle without
    samples (older, or the section dropped for size), which draws its scrapes.
    """
    anchor = (bundle.get("clock") or {}).get("monotonic")
    samples = bundle.get("samples")
    if not isinstance(anchor, int | float) or not isinstance(samples, list):
        return {}
    out: dict[str, list[tuple[float, float]]] = {}
    for metric, (group, name) in SAMPLED.items():
        points = (window.rates if group == "counters" else window.gauge)(samples, name)
        if points:
            out[metric] = [(at - anchor, value) for at, value in points]
    return out


def canaries(bundle: Mapping[str, Any]) -> dict[str, list[tuple[float, float, bool, str]]]:
    """Each kind's canaries as (sent, answered, ok, reason), seconds before the capture."""
    clock = bundle.get("clock") or {}
    anchor = clock.get("monotonic")
    out: dict[str, list[tuple[float, float, bool, str]]] = {}
    if not isinstance(anchor, int | float):
        return out  # an older bundle: no clock to place its canaries on
    for kind, results in (bundle.get("canary_history") or {}).items():
        for result in results:
            try:
                sent = float(result["started"]) - anchor
                answered = sent + float(result["duration"])
            except (KeyError, ValueError, TypeError):
                continue
            out.setdefault(str(kind), []).append(
                (sent, answered, bool(result.get("ok")), str(result.get("reason", "")))
            )
    return out


def awaited(bundle: Mapping[str, Any]) -> dict[str, list[float]]:
    """Each kind's canaries sent and not answered by the capture, seconds before it."""
    anchor = (bundle.get("clock") or {}).get("monotonic")
    section = bundle.get("outstanding")
    if not isinstance(anchor, int | float) or not isinstance(section, Mapping):
        return {}
    out: dict[str, list[float]] = {}
    for kind, sent in section.items():
        times = [float(t) - anchor for t in sent if isinstance(t, int | float)]
        if isinstance(sent, list) and times:
            out[str(kind)] = sorted(times)
    return out


def answers(bundle: Mapping[str, Any]) -> dict[str, list[Span]]:
    """Each probe's answers as spans, seconds before the capture.

    A span runs from one flip of that probe's answer to its next, the last
    one to the capture; before a probe's first kept flip its answer is unknown.
    """
    anchor = (bundle.get("clock") or {}).get("monotonic")
    flips: dict[str, list[tuple[float, bool, str]]] = {}
    if not isinstance(anchor, int | float):
        return {}  # an older bundle: no clock to place its answers on
    for entry in _entries(bundle.get("probe_answers")):
        try:
            at = float(entry["at"]) - anchor
        except (KeyError, ValueError, TypeError):
            continue
        hangs = entry.get("hangs")
        kinds = ", ".join(str(h) for h in hangs) if isinstance(hangs, list) else ""
        flips.setdefault(str(entry.get("probe", "")), []).append((at, bool(entry.get("ok")), kinds))
    out: dict[str, list[Span]] = {}
    for probe, changes in flips.items():
        changes.sort(key=lambda change: change[0])
        ends = [at for at, _, _ in changes[1:]] + [max(0.0, changes[-1][0])]
        out[probe] = [
            (at, end, ok, kinds) for (at, ok, kinds), end in zip(changes, ends, strict=True)
        ]
    return out


def restarts(bundle: Mapping[str, Any]) -> list[tuple[float, str]]:
    """Each restart ask (liveness turning red for one): when, and the hang kinds behind it."""
    anchor = (bundle.get("clock") or {}).get("monotonic")
    if not isinstance(anchor, int | float):
        return []
    out: list[tuple[float, str]] = []
    for entry in _entries(bundle.get("probe_answers")):
        if entry.get("probe") != "liveness" or entry.get("ok") or not entry.get("restart"):
            continue
        try:
            at = float(entry["at"]) - anchor
        except (KeyError, ValueError, TypeError):
            continue
        hangs = entry.get("hangs")
        out.append((at, ", ".join(str(h) for h in hangs) if isinstance(hangs, list) else ""))
    return sorted(out)


def figure(bundle: Mapping[str, Any]) -> Any:
    """The drawn matplotlib figure (the caller closes it); ImportError without matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    kinds, rates = canaries(bundle), sampled(bundle)
    metrics = rates or series(bundle)  # the raw scrapes where no samples were kept
    lanes, asks = answers(bundle), restarts(bundle)
    drawn, (lane, top, middle, bottom) = pyplot.subplots(
        4,
        1,
        sharex=True,
        figsize=(WIDTH_IN, HEIGHT_IN),
        dpi=DPI,
        height_ratios=(1.3, 2, 2, 1.5),
    )
    try:
        left = _left_edge(kinds, metrics, asks)
        _draw_answers(lane, lanes, asks, left)
        _draw_canaries(top, kinds, awaited(bundle))
        progress = "vLLM progress (per second)" if rates else "vLLM progress (counters)"
        _draw_lines(middle, metrics, PROGRESS, progress)
        _draw_lines(bottom, metrics, GAUGES, "vLLM queue (gauges)")
        cause = bundle.get("cause") or {}
        trigger = bundle.get("trigger") or {}
        for axis in (lane, top, middle, bottom):
            axis.axvline(0.0, color="black", linewidth=1.2)
            for at, _ in asks:
                axis.axvline(at, color="tab:red", linestyle="--", linewidth=1.2)
            axis.grid(True, alpha=0.3)
        lane.annotate(
            f"capture: {trigger.get('kind', '?')}",
            (0.0, 1.0),
            xycoords=("data", "axes fraction"),
            ha="right",
            va="bottom",
            fontsize=8,
        )
        if left is not None:
            bottom.set_xlim(left - 1.0, max(0.5, -left * 0.04))
        bottom.set_xlabel("seconds before the capture")
        drawn.suptitle(_title(bundle, str(cause.get("summary", "")), asks), fontsize=9)
        drawn.tight_layout()
    except BaseException:
        pyplot.close(drawn)
        raise
    return drawn


def draw(bundle: Mapping[str, Any]) -> tuple[bytes | None, str]:
    """The PNG's bytes and what it shows, or None and why it was not drawn."""
    try:
        drawn = figure(bundle)
    except ImportError:
        return (
            None,
            "not drawn: matplotlib is not installed (the timeline extra: pip install matplotlib)",
        )
    from matplotlib import pyplot

    try:
        out = io.BytesIO()
        drawn.savefig(out, format="png")
    finally:
        pyplot.close(drawn)
    kinds, metrics = canaries(bundle), sampled(bundle) or series(bundle)
    shown = f"{sum(len(v) for v in kinds.values())} canaries, {len(metrics)} metric series"
    flips = sum(len(v) for v in answers(bundle).values())
    if flips:
        shown += f", {flips} probe answers"
    if asks := restarts(bundle):
        shown += f", restart asked {-asks[-1][0]:.1f} s before"
    return out.getvalue(), shown


def _title(bundle: Mapping[str, Any], cause: str, asks: Sequence[tuple[float, str]]) -> str:
    """The incident, the hang kinds that asked for the restart (else the trigger), the cause."""
    cut = cause if len(cause) <= 110 else cause[:107] + "..."
    trigger = bundle.get("trigger") or {}
    named = f"hang: {asks[-1][1]}" if asks and asks[-1][1] else f"trigger: {trigger.get('kind')}"
    return f"sentinel incident {bundle.get('id', '')} ({named})\n{cut}"


def _entries(section: Any) -> list[Mapping[str, Any]]:
    """A list section's mappings; nothing when it is absent or not a list."""
    return [e for e in section if isinstance(e, Mapping)] if isinstance(section, list) else []


def _left_edge(
    kinds: Mapping[str, Sequence[tuple[float, float, bool, str]]],
    metrics: Mapping[str, Sequence[tuple[float, float]]],
    asks: Sequence[tuple[float, str]],
) -> float | None:
    """Where the incident's data begins, at most the samples' window before the capture.

    None: nothing but the answers to place.
    """
    times = [sent for results in kinds.values() for sent, *_ in results]
    times += [at for points in metrics.values() for at, _ in points]
    times += [at for at, _ in asks]
    return max(min(times), -window.WINDOW_S) if times else None


def _draw_answers(
    axis: Any,
    lanes: Mapping[str, Sequence[Span]],
    asks: Sequence[tuple[float, str]],
    left: float | None,
) -> None:
    names = [*PROBES, *sorted(set(lanes) - set(PROBES))]
    for row, probe in enumerate(names):
        for start, end, ok, kinds in lanes.get(probe, ()):
            if left is not None:
                if end < left:
                    continue  # over before the incident's data begins
                start = max(start, left)
            _bar(axis, row, start, end, ok, width=8)
            if not ok and kinds:
                axis.annotate(kinds, (start, row - 0.3), fontsize=7, va="bottom")
    for at, kinds in asks:
        axis.annotate(
            f"{RESTART_LABEL}: {kinds}" if kinds else RESTART_LABEL,
            (at, len(names) - 0.35),
            fontsize=7,
            color="tab:red",
            ha="right",
            va="center",
        )
    if not lanes:
        axis.text(
            0.5, 0.5, "no probe answers in this bundle", transform=axis.transAxes, ha="center"
        )
    axis.set_yticks(range(len(names)), names)
    axis.set_ylim(len(names) - 0.1, -0.7)  # liveness on top
    axis.set_title(ANSWERS_TITLE, fontsize=9, loc="left")


def _draw_canaries(
    axis: Any,
    kinds: Mapping[str, Sequence[tuple[float, float, bool, str]]],
    waiting: Mapping[str, Sequence[float]],
) -> None:
    names = sorted(set(kinds) | set(waiting))
    for row, kind in enumerate(names):
        for sent in waiting.get(kind, ()):  # still unanswered at the capture
            axis.plot(
                [sent, max(0.0, sent + 0.05)], [row, row], color="tab:gray", linewidth=6, alpha=0.6
            )
        if waiting.get(kind):
            axis.annotate("unanswered", (0.0, row), fontsize=7, va="center", ha="right")
        for sent, answered, ok, _ in kinds.get(kind, ()):
            _bar(axis, row, sent, answered, ok, width=6)
        failed = [(a, reason) for _, a, ok, reason in kinds.get(kind, ()) if not ok]
        if failed:
            axis.annotate(failed[-1][1], (failed[-1][0], row), fontsize=7, va="center")
    axis.set_yticks(range(len(names)), names or [])
    axis.set_ylim(-0.7, max(len(names), 1) - 0.3)
    axis.set_title("canaries (green passed, red failed, gray unanswered)", fontsize=9, loc="left")


def _bar(axis: Any, row: float, start: float, end: float, ok: bool, *, width: float) -> None:
    """One span on a row, green where it passed, red where not, never too short to see."""
    axis.plot(
        [start, max(end, start + 0.05)],
        [row, row],
        color="tab:green" if ok else "tab:red",
        linewidth=width,
        solid_capstyle="butt",
    )


def _draw_lines(
    axis: Any,
    metrics: Mapping[str, Sequence[tuple[float, float]]],
    names: Mapping[str, str],
    title: str,
) -> None:
    for name, label in names.items():
        points = sorted(metrics.get(name, ()))
        if points:
            axis.plot([t for t, _ in points], [v for _, v in points], marker=".", label=label)
    if any(metrics.get(n) for n in names):
        axis.legend(fontsize=7, loc="upper left")
    else:
        axis.text(0.5, 0.5, "no scrape kept", transform=axis.transAxes, ha="center")
    axis.set_title(title, fontsize=9, loc="left")


def _wall_anchor(bundle: Mapping[str, Any]) -> float:
    clock = bundle.get("clock") or {}
    wall = clock.get("wall")
    if isinstance(wall, int | float):
        return float(wall)
    try:
        return datetime.fromisoformat(str(bundle.get("started_at"))).timestamp()
    except ValueError:
        return 0.0
