"""The configuration and metrics references, generated from the code.

``docs/configuration.md`` lists every setting of ``sentinel run`` (its
flag, environment variable, default, range and what it is for, taken from
the comment above its field in :mod:`sentinel.config.settings`, or in
:class:`sentinel.verdict.Policy` for the verdict's thresholds), and
``docs/metrics.md`` every ``sentinel_*`` series a daemon registers. A unit
test regenerates both and fails when the files drift;
``python -m sentinel.config.reference`` writes them.
"""

from __future__ import annotations

import ast
import inspect
import sys
import textwrap
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from pydantic import BaseModel

from sentinel.config.loader import env_name
from sentinel.config.settings import RANGES, RestartBudget, Settings
from sentinel.evaluation.health import HealthState
from sentinel.telemetry.metrics import SentinelMetrics

DOCS = Path(__file__).resolve().parents[2] / "docs"

# What a setting is for, where no comment above its field says it.
HELP = {
    "target": "The inference server's base URL.",
    "listen": "HTTP listener for the probe endpoints, /status and /metrics.",
    "probes": "A directory of canary specs replacing the shipped catalog.",
    "enforce": "false: observe-only; hangs are reported, liveness stays 200.",
    "api_key_file": "A file holding the server's API key (or SENTINEL_API_KEY); never logged.",
    "maintenance_max": "The longest maintenance window one request may set.",
    "diagnostics_dir": "Where diagnostics bundles (and the correctness fingerprint) are kept.",
    "diagnostics": "Capture a diagnostics bundle at the first suspicion.",
    "diagnostics_max_incidents": "Bundles kept; the oldest go first.",
    "diagnostics_max_bytes": "Bytes all kept bundles may take.",
    "diagnostics_bundle_max_bytes": "Bytes one whole bundle may take.",
    "model": "The model canaries ask for (unset: the first one /v1/models lists).",
    "scheduling_policy": "The server's policy (auto: read from its command line).",
    "watch_processes": "Read the server's processes (needs the shared PID namespace).",
    "scrape_interval": "How often the server's /metrics is read.",
    "health_interval": "How often the server's /health is asked.",
    "process_interval": "How often the server's processes are sampled.",
    "eval_interval": "How often the verdict is evaluated.",
    "idle_window": "The text canary is skipped while real decode completed within it.",
    "hang_window": "Engine hang: a canary unanswered this long with no progress.",
    "no_evidence_window": "The engine-hang window where the server shows no progress evidence.",
    "dead_grace": "Engine dead: /health 5xx or an engine process down this long.",
    "broken_window": "Broken: every canary failing fast this long, nothing else completing.",
    "listener_grace": "Listener down: connections refused this long, the API server alive.",
    "path_misses": "Path hang: this many path canaries in a row without progress.",
    "ready_out_after": "Readiness out after this many bad canaries in a row.",
    "ready_back_after": "Readiness back after this many good canaries in a row.",
    "brake_max_restarts": "Restart-loop brake: hang restarts within brake_window before it holds.",
    "brake_window": "Restart-loop brake: the window restarts are counted in.",
    "engine_policy": "What an engine hang does: restart, unready or alert.",
    "dead_policy": "What a dead engine does.",
    "broken_policy": "What a broken server does.",
    "listener_policy": "What a listener down does.",
    "starved_policy": "What starved real traffic (canaries passing) does.",
    "api_policy": "What an API-server process stopped, or not reading, does.",
    "pause_bound": "A pause (a weight update, a maintenance window) longer than this is reported.",
    "paused_policy": "What a pause past its bound does.",
    "sleep_bound": "A sleep longer than this is reported (unset: sleep is unbounded).",
    "asleep_policy": "What a sleep past its bound does.",
    "shutdown_timeout": "How long an orderly shutdown may take.",
    "metrics_max_bytes": "Cap on one /metrics answer.",
    "metrics_max_lines": "Cap on the lines of one /metrics answer.",
    "metrics_max_line_bytes": "Cap on one line of /metrics.",
    "metrics_max_series": "Cap on the series kept of the signals sentinel reads.",
    "canary_max_bytes": "Cap on one canary's answer.",
    "canaries": "Per-canary overrides: interval, deadline, jitter, enabled, policy.",
    "log_format": "auto: console in a terminal, JSON otherwise.",
    "log_level": "Log level.",
}


def _field_comments(model: type[BaseModel]) -> dict[str, str]:
    """The comment lines right above each field of ``model`` or a model it inherits, joined."""
    found: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if not issubclass(cls, BaseModel) or cls is BaseModel:
            continue
        lines = textwrap.dedent(inspect.getsource(cls)).splitlines()
        (node,) = ast.parse("\n".join(lines)).body
        assert isinstance(node, ast.ClassDef)
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                above: list[str] = []
                index = item.lineno - 2
                while index >= 0 and lines[index].strip().startswith("#"):
                    above.insert(0, lines[index].strip().lstrip("#").strip())
                    index -= 1
                found[item.target.id] = " ".join(above)
    return found


def _default(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{}" if not value else str(value)
    if isinstance(value, BaseModel):
        return "see below"
    return str(getattr(value, "value", value))


def configuration() -> str:
    """``docs/configuration.md``: every setting, from the code."""
    comments = _field_comments(Settings)
    rows = [
        "# Configuration reference",
        "",
        "Generated from `sentinel/config/settings.py` (the verdict's thresholds from `Policy` in",
        "`sentinel/verdict/model.py`) by `python -m sentinel.config.reference`; a test",
        "fails when this file and the code disagree. Every setting is a flag of",
        "`sentinel run`, a `SENTINEL_*` environment variable and a key of the YAML",
        "file given with `--config`; flags win over the environment, which wins over",
        "the file.",
        "",
        "| key | flag | environment | default | range | what it is for |",
        "|---|---|---|---|---|---|",
    ]
    for name, field in Settings.model_fields.items():
        bounds = RANGES.get(name)
        span = "" if bounds is None else f"{bounds[0]:g}-{bounds[1]:g} {bounds[2]}"
        what = (comments.get(name) or HELP.get(name, "")).replace("|", "/")
        flag = "--" + name.replace("_", "-")
        rows.append(
            f"| `{name}` | `{flag}` | `{env_name(name)}` "
            f"| `{_default(field.get_default(call_default_factory=True))}` "
            f"| {span} | {what} |"
        )
    rows += _section("restart_budget", RestartBudget)
    return "\n".join(rows) + "\n"


def _section(name: str, model: type[BaseModel]) -> list[str]:
    """The keys of a nested section: given in the file or as one YAML mapping in the variable."""
    comments = _field_comments(model)
    rows = [
        "",
        f"## `{name}`",
        "",
        f"A mapping under `{name}` in the file, or the whole mapping as YAML in",
        f"`{env_name(name)}` (e.g. `{{enabled: true, slots: 1}}`).",
        "",
        "| key | default | what it is for |",
        "|---|---|---|",
    ]
    for key, field in model.model_fields.items():
        what = comments.get(key, "").replace("|", "/")
        rows.append(f"| `{name}.{key}` | `{_default(field.default)}` | {what} |")
    return rows


def metrics() -> str:
    """``docs/metrics.md``: every series a daemon's registry holds."""
    registry = CollectorRegistry()
    SentinelMetrics(registry, HealthState())
    rows = [
        "# Metrics reference",
        "",
        "Generated from the daemon's registry by `python -m sentinel.config.reference`; a test",
        "fails when this file and the code disagree. The contract names (the ones",
        "dashboards and alerts use) are in `tests/metric_contract.py`.",
        "",
        "| metric | type | labels | help |",
        "|---|---|---|---|",
    ]
    collectors = registry._names_to_collectors  # the registered metric objects, by name
    for family in sorted(registry.collect(), key=lambda f: f.name):
        declared = getattr(collectors.get(family.name), "_labelnames", ())
        labels = sorted({*declared, *(k for s in family.samples for k in s.labels)} - {"le"})
        name = family.name + ("_total" if family.type == "counter" else "")
        rows.append(
            f"| `{name}` | {family.type} | {', '.join(labels) or '-'} "
            f"| {family.documentation.replace('|', '/')} |"
        )
    return "\n".join(rows) + "\n"


REFERENCES = {"configuration.md": configuration, "metrics.md": metrics}


def main() -> int:
    for name, build in REFERENCES.items():
        (DOCS / name).write_text(build(), encoding="utf-8")
        print(f"wrote docs/{name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
