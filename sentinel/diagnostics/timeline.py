"""The incident as a picture: ``timeline.png`` drawn from what a bundle holds.

One time axis, seconds before the capture, three panels: the canaries by
kind (each a bar from its send to its answer, green when it passed, red when
it failed, the failure's reason beside the last one), vLLM's progress
counters from each kept ``/metrics`` scrape (generated and prompt tokens,
finished requests), and its queue gauges (running, waiting). The capture is
the vertical line at 0, labelled with its trigger and cause.

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

TIMELINE_FILE = "timeline.png"
# The counters and gauges drawn, vLLM's names (each summed over its label sets).
PROGRESS = {
    "vllm:generation_tokens": "generated tokens",
    "vllm:prompt_tokens": "prompt tokens",
    "vllm:request_success": "finished requests",
}
GAUGES = {"vllm:num_requests_running": "running", "vllm:num_requests_waiting": "waiting"}
WIDTH_IN, HEIGHT_IN, DPI = 10.0, 7.0, 100


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


def draw(bundle: Mapping[str, Any]) -> tuple[bytes | None, str]:
    """The PNG's bytes and what it shows, or None and why it was not drawn."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot
    except ImportError:
        return (
            None,
            "not drawn: matplotlib is not installed (pip install 'sentinel-probe[timeline]')",
        )
    kinds, metrics = canaries(bundle), series(bundle)
    figure, (top, middle, bottom) = pyplot.subplots(
        3, 1, sharex=True, figsize=(WIDTH_IN, HEIGHT_IN), dpi=DPI, height_ratios=(2, 2, 1.5)
    )
    try:
        _draw_canaries(top, kinds)
        _draw_lines(middle, metrics, PROGRESS, "vLLM progress (counters)")
        _draw_lines(bottom, metrics, GAUGES, "vLLM queue (gauges)")
        cause = bundle.get("cause") or {}
        trigger = bundle.get("trigger") or {}
        for axis in (top, middle, bottom):
            axis.axvline(0.0, color="black", linewidth=1.2)
            axis.grid(True, alpha=0.3)
        top.annotate(
            f"capture: {trigger.get('kind', '?')}",
            (0.0, 1.0),
            xycoords=("data", "axes fraction"),
            ha="right",
            va="bottom",
            fontsize=8,
        )
        bottom.set_xlabel("seconds before the capture")
        figure.suptitle(_title(bundle, str(cause.get("summary", ""))), fontsize=9)
        figure.tight_layout()
        out = io.BytesIO()
        figure.savefig(out, format="png")
    finally:
        pyplot.close(figure)
    shown = f"{sum(len(v) for v in kinds.values())} canaries, {len(metrics)} metric series"
    return out.getvalue(), shown


def _title(bundle: Mapping[str, Any], cause: str) -> str:
    cut = cause if len(cause) <= 110 else cause[:107] + "..."
    return f"sentinel incident {bundle.get('id', '')} at {bundle.get('started_at', '')}\n{cut}"


def _draw_canaries(
    axis: Any, kinds: Mapping[str, Sequence[tuple[float, float, bool, str]]]
) -> None:
    names = sorted(kinds)
    for row, kind in enumerate(names):
        for sent, answered, ok, _ in kinds[kind]:
            axis.plot(
                [sent, max(answered, sent + 0.05)],
                [row, row],
                color="tab:green" if ok else "tab:red",
                linewidth=6,
                solid_capstyle="butt",
            )
        failed = [(a, reason) for _, a, ok, reason in kinds[kind] if not ok]
        if failed:
            axis.annotate(failed[-1][1], (failed[-1][0], row), fontsize=7, va="center")
    axis.set_yticks(range(len(names)), names or [])
    axis.set_ylim(-0.7, max(len(names), 1) - 0.3)
    axis.set_title("canaries (green passed, red failed)", fontsize=9, loc="left")


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
