"""The simulator's faults and control routes as a person reads them: ``--help`` and docs/chaos.

Generated from the fault registry (:class:`~sentinel_sim.faults.Fault`, each
fault's parameters and defaults from :meth:`FaultSpec.build`), so neither the
simulator's ``--help`` nor ``docs/chaos/faults.md`` can drift from it: a unit
test fails when a fault has no line here or the file differs from
:func:`faults_markdown` (``python -m sentinel_sim.fault_help`` writes it).
The full semantics of each fault stay in :mod:`sentinel_sim.faults`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from sentinel_sim.faults import ENGINE_FAULTS, Fault, FaultSpec

DOC = Path(__file__).resolve().parents[1] / "docs" / "chaos" / "faults.md"

SUMMARIES: dict[Fault, str] = {
    Fault.ENGINE_HANG: "the engine loop blocks (spin: busy-waits); /health 200, /metrics frozen",
    Fault.STRUCTURED_HANG: "grammar compilation never ends: structured requests wait",
    Fault.MULTIMODAL_HANG: "image preprocessing blocks; later image requests queue",
    Fault.STREAM_STALL: "requests stop receiving tokens after `after` tokens",
    Fault.SLOW_DECODE: "each step `factor` times slower (or `token_s` per token): degraded",
    Fault.ERROR_5XX: "generation answers `status` with probability `rate`",
    Fault.GARBAGE: "replies broken: invalid_json or schema_break",
    Fault.BLACKHOLE: "connections accepted, requests never answered",
    Fault.EXIT: "the API server exits with `code` after `delay` seconds",
    Fault.STUCK_RUNNING: "engine hung with `requests` real requests in running",
    Fault.WAITING_CHURN: "engine hung; the waiting gauge keeps changing",
    Fault.PREEMPTION_CHURN: "engine hung; num_preemptions_total keeps growing",
    Fault.PREFILL_NO_DECODE: "prompts are prefilled; no token is ever decoded",
    Fault.STALL_AFTER_FIRST: "every stream stops after its first token",
    Fault.DECODE_DEAD: "the decode loop died, prefill alive (vLLM #45094)",
    Fault.STARVE: "only requests with priority below `below` are admitted",
    Fault.CACHE_FRONT: "a caching proxy in front: a body seen before is answered from cache",
    Fault.API_WEDGE: "API-server process `server` (of --api-server-count) wedged",
    Fault.RESET_ALL: "each generation request's connection closed without a response",
    Fault.EMPTY_200: "HTTP 200 with zero generated tokens",
    Fault.LISTENER_CLOSED: "the API port closes for good; the process lives",
    Fault.METRICS_LAPSE: "/metrics never answers; serving goes on",
    Fault.METRICS_401: "/metrics answers 401 (a proxy wanting credentials)",
    Fault.LONG_PREFILL: "legitimate: a real request with a `tokens`-long prompt prefills",
    Fault.SLEEP: "legitimate: sleep mode `level`; requests queue (or 503 under mode=503)",
    Fault.PAUSE: "legitimate: the scheduler paused, as by POST /pause",
    Fault.WEIGHT_UPDATE: "legitimate: the engine inside an RL weight-update RPC",
    Fault.COMPILE_STEP: "legitimate: one step lasts `seconds` while a compiler child runs",
    Fault.SLOW_IMAGE: "legitimate: each image request waits `seconds` in preprocessing",
    Fault.ELASTIC_SCALE: "an elastic EP scale: every path answers vLLM's scaling 503",
    Fault.WEIGHTS_LOST: "silent corruption: every free-text reply one token repeated",
    Fault.WEIGHTS_UPDATED: "replies change and `version` is declared at /weight_info",
    Fault.NO_LOGPROBS: "a proxy strips log-probabilities (`logprobs` null)",
    Fault.NEAR_TIES: "GPU batch variance: close candidates; `flip` none, third or far",
    Fault.REMOTE_KV: "a disaggregated decode node: remote requests wait for their KV",
    Fault.WAKE_HANG: "idle auto-sleep's broken twin: a request's wake never completes",
    Fault.REFUSE: "every generation request refused with `status` and `message`",
}

#: The control port's routes (:mod:`sentinel_sim.control_api`, and the fault-tolerance
#: routes of :mod:`sentinel_sim.fault_tolerance`); a test compares them with the app's.
CONTROL_ROUTES: tuple[tuple[str, str, str], ...] = (
    ("GET", "/faults", "the active faults, their parameters and time left"),
    ("PUT", "/faults/{name}", 'switch a fault on: {"params": {...}, "duration": s}'),
    ("POST", "/faults/{name}", "the same as PUT"),
    ("DELETE", "/faults/{name}", "switch one fault off"),
    ("DELETE", "/faults", "switch every fault off"),
    ("POST", "/engine/signal", '{"signal": "stop"|"cont"|"kill", "engine": i, "worker": r}'),
    ("GET", "/state", "pids, policy, whether the engine is alive"),
    ("PUT", "/fault_tolerance/engines/{engine}", "one rank's fault-tolerance status"),
    ("GET", "/fault_tolerance", "the fault-tolerance status and the calls seen"),
)


def _params(fault: Fault) -> str:
    params = {k: v for k, v in FaultSpec.build(fault.value).params.items() if k != "message"}
    if fault is Fault.REFUSE:
        params["message"] = "..."
    if fault in ENGINE_FAULTS:
        params["engine"] = "all"
    return ", ".join(
        f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in params.items()
    )


def fault_rows() -> list[tuple[str, str, str]]:
    """(name, parameters with their defaults, what it does) for every fault, in registry order."""
    return [(fault.value, _params(fault), SUMMARIES[fault]) for fault in Fault]


def epilog() -> str:
    """The simulator's ``--help`` epilog: every fault and control route."""
    lines = [f"faults ({len(Fault)}; --fault NAME[:k=v,...,duration=S], or the control port):"]
    for name, params, what in fault_rows():
        lines.append(f"  {name}" + (f" ({params})" if params else ""))
        lines.append(f"      {what}")
    lines.append("control routes (--control-port; JSON in and out):")
    lines += [f"  {method} {path}: {what}" for method, path, what in CONTROL_ROUTES]
    lines.append("every fault in full: sentinel_sim/faults.py; docs/chaos/faults.md")
    return "\n".join(lines)


def faults_markdown() -> str:
    """``docs/chaos/faults.md``: the same lists as a table."""
    rows = [
        "# The simulator's faults and control routes",
        "",
        "Generated from the fault registry by `python -m sentinel_sim.fault_help`",
        "(the same lists as `python -m sentinel_sim --help`); a unit test fails when",
        "they drift. Each fault in full: `sentinel_sim/faults.py`. A fault is switched",
        "on at start (`--fault NAME[:k=v,...,duration=S]`) or at run time on the",
        "control port; `engine=N` aims an engine fault at one data-parallel engine.",
        "",
        f"| fault ({len(Fault)}) | parameters (defaults) | what it does |",
        "|---|---|---|",
    ]
    rows += [f"| `{n}` | {p or '-'} | {_cell(w)} |" for n, p, w in fault_rows()]
    rows += ["", "| control route | what it does |", "|---|---|"]
    rows += [f"| `{m} {p}` | {_cell(w)} |" for m, p, w in CONTROL_ROUTES]
    return "\n".join(rows) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def main() -> int:
    DOC.write_text(faults_markdown(), encoding="utf-8")
    print(f"wrote {DOC}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
