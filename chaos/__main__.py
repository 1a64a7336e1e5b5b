"""``python -m chaos``: run chaos scenarios and write the report, or list the scenarios.

``python -m chaos run FILE [FILE ...] [--out DIR] [--docs DIR]`` runs the
scenarios (grouped so one server serves every scenario with the same target,
SIGKILL last), shows progress while they run, and writes the report to
``DIR/<timestamp>/`` and ``DIR/latest/``; ``--docs`` also copies the table and
overview plot there. Exit 0 when every scenario passed its checks, 1 when one
failed, 2 when a scenario file is invalid.

``python -m chaos supervise FILE [FILE ...] [--checkers sentinel,vllm_health,naive,blackbox]
[--load-time S] [--watch-after S] [--recover-within S] [--runs N] [--out DIR]
[--docs PAGE]`` runs each scenario under the harness's kubelet N times per checker
(what its liveness follows), which really restarts the server
(:mod:`chaos.supervised`), and writes ``supervised.md`` and ``supervised.json``:
detect and recover per scenario beside the baselines, medians and spreads with
N > 1; ``--docs`` writes the tables into the page too. Exit 0 when every
sentinel run passed (a fault: one restart and the new server serving; a working
server: none), 1 otherwise; the baselines' figures are reported, not judged.

``python -m chaos list [DIR]`` prints each scenario's name, target and fault.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml
from rich.console import Console
from rich.table import Table

from chaos.scenario import SCENARIO_DIR, Scenario, ScenarioError, discover, load_scenario

DEFAULT_OUT = Path("reports/chaos")


def _load_all(paths: Sequence[Path]) -> list[Scenario]:
    scenarios, errors, names = [], [], set()
    for path in paths:
        try:
            scenario = load_scenario(path)
        except ScenarioError as exc:
            errors.append(str(exc))
            continue
        if scenario.name in names:
            errors.append(f"{path}: name: {scenario.name!r} is used by another scenario")
        names.add(scenario.name)
        scenarios.append(scenario)
    if errors:
        raise ScenarioError("\n".join(errors))
    return scenarios


def _run(args: argparse.Namespace) -> int:
    from chaos import report, runner
    from chaos.analysis import Summary
    from chaos.records import RunRecord
    from sentinel.telemetry.logging import configure_logging

    console = Console(stderr=True)
    scenarios = _load_all([Path(p) for p in args.files])
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out_dir = Path(args.out) / stamp
    out_dir.mkdir(parents=True, exist_ok=True)
    log_file = (out_dir / "sentinel.log").open("w", encoding="utf-8")
    configure_logging("info", renderer="json", stream=log_file)
    done: list[tuple[Summary, RunRecord]] = []

    def on_result(summary: Summary, record: RunRecord) -> None:
        done.append((summary, record))
        report.write(done, out_dir)  # partial report after every scenario

    console.log(f"{len(scenarios)} scenario(s); report in {out_dir}")
    try:
        asyncio.run(runner.run_all(scenarios, out_dir, console, on_result))
    finally:
        log_file.close()
    if not done:
        return 1
    paths = report.write(
        done,
        out_dir,
        latest=Path(args.out) / "latest",
        docs=Path(args.docs) if args.docs else None,
        docs_name=args.docs_name,
    )
    print(paths["markdown"].read_text(encoding="utf-8"))
    console.log(f"report: {paths['json']}, {paths['markdown']}, {paths['png']}")
    return 0 if all(summary.passed for summary, _ in done) else 1


def _supervise(args: argparse.Namespace) -> int:
    from chaos import supervised, supervised_report
    from sentinel.telemetry.logging import configure_logging

    console = Console(stderr=True)
    scenarios = _load_all([Path(p) for p in args.files])
    checkers = tuple(c.strip() for c in args.checkers.split(",") if c.strip())
    unknown = sorted(set(checkers) - set(supervised.CHECKERS))
    if unknown:
        print(f"--checkers: unknown {', '.join(unknown)} (of {', '.join(supervised.CHECKERS)})")
        return 2
    overrides = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key:
            print(f"--set: KEY=VALUE, not {item!r}")
            return 2
        overrides[key.strip()] = yaml.safe_load(value)
    from chaos.scenario import sentinel_settings
    from sentinel.config.loader import ConfigError

    for scenario in scenarios:
        given = scenario.model_copy(update={"sentinel": {**scenario.sentinel, **overrides}})
        try:
            sentinel_settings(given, "http://127.0.0.1:8000", Path("/nonexistent"))
        except ConfigError as exc:
            print(f"--set: {scenario.name}: {exc}")
            return 2
    options = supervised.Options(
        sentinel=overrides,
        checkers=checkers,
        load_time=args.load_time,
        recover_within=args.recover_within,
        watch_after=args.watch_after,
        runs=args.runs,
    )
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out_dir = Path(args.out) / f"supervised-{stamp}"
    out_dir.mkdir(parents=True, exist_ok=True)
    log_file = (out_dir / "sentinel.log").open("w", encoding="utf-8")
    configure_logging("info", renderer="json", stream=log_file)
    done: list[supervised.SupervisedRecord] = []

    def on_result(record: supervised.SupervisedRecord) -> None:
        done.append(record)
        supervised_report.write(done, out_dir)

    if not 1 <= args.runs <= 20:
        print(f"--runs: 1 to 20, not {args.runs}")
        return 2
    runs = len(scenarios) * len(checkers) * args.runs
    console.log(f"{runs} supervised run(s); report in {out_dir}")
    measured = supervised_report.commit()  # the code measured is the code at the start
    try:
        asyncio.run(supervised.run_supervised(scenarios, out_dir, console, options, on_result))
    finally:
        log_file.close()
    if not done:
        return 1
    paths = supervised_report.write(done, out_dir)
    print(paths["markdown"].read_text(encoding="utf-8"))
    if args.docs is not None:  # the figures written where they are read, by this command
        said = [a for a in sys.argv[2:] if a != args.note and a != "--note"]
        how = "python -m chaos supervise " + " ".join(said)
        supervised_report.write_docs(
            done, Path(args.docs), args.docs_section, how, args.note, measured=measured
        )
    return 0 if all(r.passed for r in done if r.checker == "sentinel") else 1


def _list(args: argparse.Namespace) -> int:
    table = Table(title="chaos scenarios")
    for column in ("file", "name", "target", "fault", "load"):
        table.add_column(column)
    for scenario_path in discover(Path(args.directory)):
        scenario = load_scenario(scenario_path)
        fault = scenario.fault
        load = scenario.load
        table.add_row(
            scenario_path.name,
            scenario.name,
            scenario.target.kind,
            fault.kind + (f" ({fault.process})" if fault.process else ""),
            "-" if load is None else f"{load.concurrency} x {load.duration:g}s",
        )
    Console().print(table)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m chaos", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run scenarios and write the report")
    run.add_argument("files", nargs="+", help="scenario YAML files")
    run.add_argument("--out", default=str(DEFAULT_OUT), help="report root (default %(default)s)")
    run.add_argument("--docs", default=None, help="also copy report.md and timeline.png here")
    run.add_argument(
        "--docs-name",
        default="report",
        help="the name under --docs: NAME.md and NAME.png (report: report.md, timeline.png)",
    )
    supervise = commands.add_parser("supervise", help="run scenarios under the harness's kubelet")
    supervise.add_argument("files", nargs="+", help="scenario YAML files")
    supervise.add_argument(
        "--checkers",
        default="sentinel,vllm_health,naive,blackbox",
        help="what the kubelet's liveness follows, one run each (default %(default)s)",
    )
    supervise.add_argument(
        "--load-time", type=float, default=8.0, help="simulator model load, s (default 8)"
    )
    supervise.add_argument(
        "--watch-after",
        type=float,
        default=None,
        help="s watched after recovery (default 600, on the scenario's time scale: 120 for sim)",
    )
    supervise.add_argument(
        "--recover-within",
        type=float,
        default=None,
        help="s from the fault to recover (default 300, on the time scale: 60 for sim)",
    )
    supervise.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a sentinel setting over the scenario's (YAML value), e.g. watch_processes=false",
    )
    supervise.add_argument("--out", default=str(DEFAULT_OUT), help="report root")
    supervise.add_argument(
        "--runs", type=int, default=1, help="runs per scenario and checker (medians, spreads)"
    )
    supervise.add_argument(
        "--docs", default=None, help="also write the tables into this page (a marked section)"
    )
    supervise.add_argument(
        "--docs-section", default="runs", help="the page's section for --docs (default: runs)"
    )
    supervise.add_argument("--note", default="", help="a sentence written above the tables")
    listing = commands.add_parser("list", help="list the scenarios")
    listing.add_argument("directory", nargs="?", default=str(SCENARIO_DIR))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        commands = {"run": _run, "supervise": _supervise, "list": _list}
        return commands[args.command](args)
    except ScenarioError as exc:
        print(exc, file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
