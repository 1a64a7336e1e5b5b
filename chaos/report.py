"""The chaos report: JSON, a Markdown table and timeline PNGs for a set of scenario runs.

Written to ``reports/chaos/<timestamp>/`` and mirrored to ``reports/chaos/latest/``
(``reports/`` is git-ignored); ``--docs DIR`` also copies the table and the
overview plot to a committed folder (``docs/chaos/``) for the README.

Columns, for sentinel, a kubelet-like prober on vLLM's own ``/health``, the
naive canary and blackbox_exporter scraped by Prometheus: seconds from fault
start to the first sign (``/livez`` red, ``/health`` non-200, naive trip, a
failed probe) and to the would-be kill (the kubelet's, or the alert's on three
failed scrapes), false kills (outside a harmful fault's window), and canary
latency. A baseline that could not run (blackbox_exporter not installed) shows
"not run".
"""

from __future__ import annotations

import itertools
import json
import shutil
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.axes import Axes

from chaos.analysis import CANARY_KINDS, BlackboxFigures, Latency, Summary
from chaos.records import RunRecord

COLORS = {"text": "tab:blue", "structured": "tab:orange", "multimodal": "tab:green"}
NAIVE_COLOR = "tab:purple"
BLACKBOX_COLOR = "tab:brown"
NOT_RUN = "not run"
GAP = 3.0  # seconds between samples beyond which the timeline shows no verdict


def _s(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value)


def _p(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _cell(lat: Latency) -> str:
    return "-" if not lat.count else f"{_p(lat.p50)} / {_p(lat.p99)} ({lat.failed} failed)"


def _blackbox_cells(s: Summary) -> list[str]:
    """The blackbox columns: first failed probe, would-be kill (or "not run" for both)."""
    bb: BlackboxFigures = s.blackbox
    if not bb.ran:
        return [NOT_RUN, NOT_RUN]
    if s.fault_start_s is None:
        failed = sum(m.failed for m in bb.modules.values())
        return [f"failed probes: {failed}", _s(bb.kills.detection_s)]
    return [_s(bb.first_failure_s), _s(bb.kills.detection_s)]


def markdown(summaries: Sequence[Summary], title: str = "Chaos scenarios") -> str:
    """The report's table, plus a canary-latency table; all times in seconds."""
    lines = [
        f"## {title}",
        "",
        "Seconds from fault start. *red*: sentinel `/livez` 503; *kill*: when a kubelet-like "
        "prober (the manifest's liveness settings) would restart vLLM; *non-200*: vLLM's own "
        "`/health`; *trip*: the naive canary (same prompt, priority 0, no progress evidence); "
        "*blackbox*: blackbox_exporter's `/health` and one-token completion probes scraped as "
        "Prometheus would, *fail* its first failed probe, *kill* the third failed scrape in a "
        "row (an alert `probe_success == 0` for 30 s at a 15 s interval; settings below). "
        "False kills are would-be kills outside a harmful fault's window. - : never.",
        "",
        "| scenario | target | fault | sentinel red | sentinel kill | hang kinds "
        "| vLLM /health non-200 | /health kill | naive trip | naive kill "
        "| blackbox fail | blackbox kill "
        "| false kills (sentinel / health / naive / blackbox) | green again | result |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        sen, health, naive = s.sentinel, s.vllm_health, s.naive
        result = "pass" if s.passed else "**FAIL**"
        if s.error:
            result += f" ({s.error[:60]})"
        lines.append(
            "| "
            + " | ".join(
                [
                    s.name,
                    s.target,
                    s.fault,
                    _s(sen.livez_red_s)
                    if s.fault_start_s is not None
                    else f"red samples: {sen.liveness_failed_samples}",
                    _s(sen.kills.detection_s),
                    ", ".join(sen.hang_kinds) or "-",
                    _s(health.non_200_s),
                    _s(health.kills.detection_s),
                    _s(naive.tripped_s) if s.fault_start_s is not None else f"trips: {naive.trips}",
                    _s(naive.kills.detection_s),
                    *_blackbox_cells(s),
                    f"{sen.kills.false_kills} / {health.kills.false_kills} / "
                    f"{naive.kills.false_kills} / "
                    + (str(s.blackbox.kills.false_kills) if s.blackbox.ran else NOT_RUN),
                    _s(sen.green_again_s),
                    result,
                ]
            )
            + " |"
        )
    lines += [
        "",
        "Canary latency, p50 / p99 in seconds (failed count), sentinel's canaries (priority "
        "-100) and the naive canary (priority 0); under load where the scenario has load.",
        "",
        "| scenario | text | structured | multimodal | naive (priority 0) |",
        "|---|---|---|---|---|",
    ]
    for s in summaries:
        window = "under_load" if s.load else "all"
        cells = []
        for kind in CANARY_KINDS:
            latencies = s.sentinel.canary_latency.get(kind)
            cells.append("-" if latencies is None else _cell(latencies.window(window)))
        cells.append(_cell(s.naive.latency.window(window)))
        lines.append(f"| {s.name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Baseline settings, seconds: the kubelet-like prober (period / timeout / failures / "
        "grace) and blackbox_exporter (scrape interval / scrape timeout / failures; the "
        "simulator scenarios scale Prometheus's 15 s / 10 s like the prober's period). "
        "*killed by*: the blackbox module whose failures would have restarted vLLM.",
        "",
        "| scenario | kubelet prober | blackbox_exporter | blackbox killed by |",
        "|---|---|---|---|",
    ]
    for s in summaries:
        p, bb = s.prober, s.blackbox
        prober = f"{p.period:g} / {p.timeout:g} / {p.failure_threshold} / {p.grace:g}"
        if bb.ran and bb.settings is not None:
            b = bb.settings
            box = f"{b.interval:g} / {b.scrape_timeout:g} / {b.failure_threshold}"
            counts = Counter(bb.killed_by)
            killed_by = ", ".join(f"{m} x{n}" if n > 1 else m for m, n in counts.items()) or "-"
        else:
            box, killed_by = f"{NOT_RUN}: {(bb.not_run or '')[:80]}", NOT_RUN
        lines.append(f"| {s.name} | {prober} | {box} | {killed_by} |")
    failed = [(s.name, c.check, c.detail) for s in summaries for c in s.checks if not c.ok] + [
        (s.name, "run", s.error) for s in summaries if s.error
    ]
    if failed:
        lines += ["", "Failed checks:", ""]
        lines += [f"- {name}: {check}: {detail}" for name, check, detail in failed]
    return "\n".join(lines) + "\n"


def _shade(ax: Axes, summary: Summary, record: RunRecord) -> None:
    start = record.fault_start
    if start is not None:
        end = record.fault_end if record.fault_end is not None else record.end
        ax.axvspan(start, end, color="tab:red", alpha=0.12, lw=0)
    if record.load_window is not None:
        ax.axvspan(*record.load_window, color="tab:gray", alpha=0.08, lw=0)


def _latency(ax: Axes, record: RunRecord, legend: bool) -> None:
    for kind, color in COLORS.items():
        points = [c for c in record.canaries if c.kind == kind]
        ok = [c for c in points if c.ok]
        bad = [c for c in points if not c.ok]
        ax.scatter([c.started for c in ok], [c.duration for c in ok], s=10, color=color, label=kind)
        ax.scatter(
            [c.started for c in bad], [c.duration for c in bad], s=22, color=color, marker="x"
        )
    ok_naive = [c for c in record.naive if c.ok]
    bad_naive = [c for c in record.naive if not c.ok]
    ax.scatter(
        [c.started for c in ok_naive],
        [c.duration for c in ok_naive],
        s=10,
        color=NAIVE_COLOR,
        marker="^",
        label="naive (prio 0)",
    )
    ax.scatter(
        [c.started for c in bad_naive],
        [c.duration for c in bad_naive],
        s=22,
        color=NAIVE_COLOR,
        marker="x",
    )
    ax.set_yscale("log")
    ax.set_ylabel("canary s")
    if legend:
        ax.legend(loc="lower left", fontsize=6, ncol=4, framealpha=0.9)


def _verdicts(ax: Axes, record: RunRecord) -> None:
    samples = record.samples
    times = [s.at for s in samples]
    rows = [
        ("livez", 3, "tab:red"),
        ("readyz", 2, "tab:orange"),
        ("startupz", 1, "tab:olive"),
        ("vllm_health", 0, "tab:cyan"),
    ]
    # A gap in the samples (the sampler itself was starved) is drawn as a gap, not as 200.
    known = [b - a <= GAP for a, b in itertools.pairwise(times)] + [True]
    for name, level, color in rows:
        ok = [getattr(s, name) == 200 for s in samples]
        ax.fill_between(
            times,
            level,
            [level + (0.8 if good else 0.0) for good in ok],
            where=known,
            step="post",
            color=color,
            alpha=0.6,
            lw=0,
        )
    naive = [(s.at, s.naive_ok) for s in samples if s.naive_ok is not None]
    if naive:
        ax.fill_between(
            [t for t, _ in naive],
            4,
            [4 + (0.8 if good else 0.0) for _, good in naive],
            step="post",
            color=NAIVE_COLOR,
            alpha=0.6,
            lw=0,
        )
    for level, module in ((5, "vllm_health"), (6, "vllm_completion")):
        scrapes = sorted(
            (p.started + p.duration, p.ok) for p in record.blackbox if p.module == module
        )
        if scrapes:
            ax.fill_between(
                [t for t, _ in scrapes] + [record.end],
                level,
                [level + (0.8 if good else 0.0) for _, good in scrapes] + [level],
                step="post",
                color=BLACKBOX_COLOR,
                alpha=0.6,
                lw=0,
            )
    markers = {
        "sentinel": ("tab:red", 3.9),
        "vllm_health": ("tab:cyan", 0.9),
        "blackbox": (BLACKBOX_COLOR, 6.9),
    }
    for name, kills in record.kills.items():
        color, height = markers.get(name, (NAIVE_COLOR, 4.9))
        for kill in kills:
            ax.scatter(
                [kill.at], [height], marker="v", color=color, edgecolor="black", s=40, zorder=3
            )
    ax.set_yticks([0.4, 1.4, 2.4, 3.4, 4.4, 5.4, 6.4])
    labels = ["vLLM /health", "startupz", "readyz", "livez", "naive", "bb /health"]
    labels.append("bb completion" if record.blackbox_not_run is None else "bb: not run")
    ax.set_yticklabels(labels, fontsize=6)
    ax.set_ylim(-0.2, 7.2)
    ax.set_title("bands: answering 200; triangles: would-be kills", fontsize=6, loc="right")


def _load(ax: Axes, record: RunRecord) -> None:
    times = [s.at for s in record.samples]
    nan = float("nan")
    running = [nan if s.running is None else s.running for s in record.samples]
    waiting = [nan if s.waiting is None else s.waiting for s in record.samples]
    ax.plot(times, running, color="tab:blue", lw=1, label="running")
    ax.plot(times, waiting, color="tab:gray", lw=1, label="waiting")
    ax.set_ylabel("requests")
    ax.legend(loc="upper left", fontsize=6)


def scenario_png(summary: Summary, record: RunRecord, path: Path) -> None:
    """One scenario: canary latency per kind, verdicts and would-be kills, load."""
    fig, axes = plt.subplots(3, 1, figsize=(10, 7), sharex=True, height_ratios=[3, 2, 1.5])
    _latency(axes[0], record, legend=True)
    _verdicts(axes[1], record)
    _load(axes[2], record)
    for ax in axes:
        _shade(ax, summary, record)
    axes[2].set_xlabel("seconds since sentinel started (red: fault window, grey: load)")
    fig.suptitle(f"{summary.name}: {summary.fault} on {summary.target}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def overview_png(runs: Sequence[tuple[Summary, RunRecord]], path: Path) -> None:
    """Every scenario in one figure: canary latency over verdict bands, two columns."""
    count = max(1, len(runs))
    columns = 2 if count > 1 else 1
    rows = (count + columns - 1) // columns
    fig = plt.figure(figsize=(7 * columns, 3.4 * rows))
    grid = fig.add_gridspec(rows * 2, columns, height_ratios=[2, 1] * rows, hspace=0.5)
    for index, (summary, record) in enumerate(runs):
        row, column = divmod(index, columns)
        top = fig.add_subplot(grid[row * 2, column])
        bottom = fig.add_subplot(grid[row * 2 + 1, column], sharex=top)
        _latency(top, record, legend=index == 0)
        _verdicts(bottom, record)
        for ax in (top, bottom):
            _shade(ax, summary, record)
        top.set_title(f"{summary.name} ({summary.target}): {summary.fault}", fontsize=9)
        top.tick_params(labelbottom=False)
    fig.savefig(path, dpi=90, bbox_inches="tight")
    plt.close(fig)


def write(
    runs: Sequence[tuple[Summary, RunRecord]],
    out_dir: Path,
    latest: Path | None = None,
    docs: Path | None = None,
    docs_name: str = "report",
) -> dict[str, Path]:
    """Write report.json, report.md, timeline.png and one PNG per scenario; mirror them.

    ``docs``: the table and plot also go there, as ``report.md`` and
    ``timeline.png``, or as ``NAME.md`` and ``NAME.png`` for another
    ``docs_name`` (``make chaos-sim``: ``sim-report``), written by the run
    itself, never copied by hand.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    summaries = [summary for summary, _ in runs]
    document = {
        "scenarios": [summary.to_json() for summary in summaries],
        "timelines": {
            record.scenario.name: {
                "samples": [
                    {
                        "at": round(s.at, 2),
                        "livez": s.livez,
                        "readyz": s.readyz,
                        "startupz": s.startupz,
                        "vllm_health": s.vllm_health,
                        "hangs": s.hangs,
                        "running": s.running,
                        "waiting": s.waiting,
                    }
                    for s in record.samples
                ],
                "canaries": [
                    {
                        "kind": c.kind,
                        "started": round(c.started, 3),
                        "duration": round(c.duration, 4),
                        "ok": c.ok,
                        "reason": c.reason,
                    }
                    for c in [*record.canaries, *record.naive]
                ],
                "blackbox": [
                    {
                        "module": p.module,
                        "started": round(p.started, 3),
                        "duration": round(p.duration, 4),
                        "ok": p.ok,
                        "detail": p.detail,
                    }
                    for p in record.blackbox
                ],
            }
            for _, record in runs
        },
    }
    paths = {
        "json": out_dir / "report.json",
        "markdown": out_dir / "report.md",
        "png": out_dir / "timeline.png",
    }
    paths["json"].write_text(json.dumps(document, indent=1), encoding="utf-8")
    paths["markdown"].write_text(markdown(summaries), encoding="utf-8")
    overview_png(runs, paths["png"])
    for summary, record in runs:
        scenario_png(summary, record, out_dir / f"{record.scenario.name}.png")
    if latest is not None:
        if latest.exists():
            shutil.rmtree(latest)
        shutil.copytree(out_dir, latest, ignore=shutil.ignore_patterns("servers", "diagnostics"))
    if docs is not None:
        docs.mkdir(parents=True, exist_ok=True)
        shutil.copy2(paths["markdown"], docs / f"{docs_name}.md")
        png = "timeline.png" if docs_name == "report" else f"{docs_name}.png"
        shutil.copy2(paths["png"], docs / png)
    return paths
