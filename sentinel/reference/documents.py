"""The configuration, metrics and verdict references, generated from the code.

``docs/configuration.md`` lists every setting of ``sentinel run`` (its
flag, environment variable, default, range and what it is for), read from
the one declaration of each field (:func:`sentinel.knob.setting`) in
:mod:`sentinel.config.settings`, or in the rules' knobs that
:class:`sentinel.verdict.Policy` composes for the verdict's thresholds; and
``docs/metrics.md`` every ``sentinel_*`` family a daemon's collectors declare
(the event metrics, the state collector beside the servers, the restart
budget's own series); ``docs/verdict.md`` the hang rules as registered
(:mod:`sentinel.verdict.table`); ``docs/layout.md`` every module
(:mod:`sentinel.reference.layout`). A unit test regenerates them and fails
when the files drift; ``python -m sentinel.reference`` writes them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from pydantic import BaseModel

from sentinel.canary.kinds import path_kinds
from sentinel.config.loader import env_name
from sentinel.config.settings import RENAMED, CanaryOverride, RestartBudget, Settings
from sentinel.evaluation.health import HealthState
from sentinel.knob import help_of, span_of
from sentinel.reference.layout import layout
from sentinel.serve.state_metrics import daemon_metrics
from sentinel.verdict.table import verdict_reference

DOCS = Path(__file__).resolve().parents[2] / "docs"

# The nested sections: each key's model, and an example of the whole mapping as YAML.
SECTIONS: dict[str, tuple[type[BaseModel], str]] = {
    "canaries": (CanaryOverride, "{text: {interval: 10, deadline: 20}}"),
    "restart_budget": (RestartBudget, "{enabled: true, slots: 1}"),
}


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


def _range(model: type[BaseModel], name: str) -> str:
    span = span_of(model, name)
    return "" if span is None else str(span)


def _what(model: type[BaseModel], name: str) -> str:
    return help_of(model, name).replace("|", "/")


def configuration() -> str:
    """``docs/configuration.md``: every setting, from the code."""
    rows = [
        "# Configuration reference",
        "",
        "Generated from `sentinel/config/settings.py` (the verdict's thresholds from the",
        "rules' knobs that `Policy` in `sentinel/verdict/policy.py` composes) by",
        "`python -m sentinel.reference`; a test fails when this file and the code",
        "disagree. Every setting is a flag of",
        "`sentinel run`, a `SENTINEL_*` environment variable and a key of the YAML",
        "file given with `--config`; flags win over the environment, which wins over",
        "the file.",
        "",
        "| key | flag | environment | default | range | what it is for |",
        "|---|---|---|---|---|---|",
    ]
    for name, field in Settings.model_fields.items():
        flag = "--" + name.replace("_", "-")
        rows.append(
            f"| `{name}` | `{flag}` | `{env_name(name)}` "
            f"| `{_default(field.get_default(call_default_factory=True))}` "
            f"| {_range(Settings, name)} | {_what(Settings, name)} |"
        )
    rows += _renamed()
    for name, (model, example) in SECTIONS.items():
        rows += _section(name, model, example)
    return "\n".join(rows) + "\n"


def _renamed() -> list[str]:
    """The old names still accepted, so a search for one finds what it is called now."""
    rows = [
        "",
        "## Renamed settings",
        "",
        "Old names still accepted as key, flag and variable, each with one note on",
        "stderr naming the new one. Both in one file or as flags are refused; both as",
        "variables (manifests set the new one, an older overlay the old one), the new one",
        "wins and a note names the old one's unread value.",
        "",
        "| old key, flag and environment | now |",
        "|---|---|",
    ]
    for old, new in RENAMED.items():
        rows.append(f"| `{old}`, `--{old.replace('_', '-')}`, `{env_name(old)}` | `{new}` |")
    return rows


def _section(name: str, model: type[BaseModel], example: str) -> list[str]:
    """The keys of a nested section: given in the file or as one YAML mapping in the variable."""
    rows = [
        "",
        f"## `{name}`",
        "",
        f"A mapping under `{name}` in the file, or the whole mapping as YAML in",
        f"`{env_name(name)}` or `--{name.replace('_', '-')}` (e.g. `{example}`).",
        "",
        "| key | default | range | what it is for |",
        "|---|---|---|---|",
    ]
    key_of = "{name}.<canary>.{key}" if model is CanaryOverride else "{name}.{key}"
    for key, field in model.model_fields.items():
        rows.append(
            f"| `{key_of.format(name=name, key=key)}` | `{_default(field.default)}` "
            f"| {_range(model, key)} | {_what(model, key)} |"
        )
    return rows


class _Declared(CollectorRegistry):
    """A registry that remembers what was registered, so each collector's ``describe()`` is read."""

    def __init__(self) -> None:
        super().__init__()
        self.collectors: list[Collector] = []

    def register(self, collector: Collector) -> None:
        super().register(collector)
        self.collectors.append(collector)


def declared_families() -> list[tuple[str, str, tuple[str, ...], str]]:
    """Every family a daemon's registry declares: (exposed name, type, labels, help).

    Read from each collector's ``describe()``, the custom collectors' included,
    not from the samples of a fresh state, so a series a collector yields only
    in some states (``sentinel_priority_effective`` while known) is listed too.
    """
    registry = _Declared()
    daemon_metrics(registry, HealthState())
    rows = []
    for collector in registry.collectors:
        describe: Callable[[], Iterable[Metric]] | None = getattr(collector, "describe", None)
        if describe is None:  # a collector that declares nothing cannot be documented
            raise TypeError(f"{type(collector).__name__} has no describe(): nothing to document")
        for family in describe():
            # A metric object keeps its label names; a custom family carries its own.
            labels = tuple(getattr(family, "_labelnames", None) or ())
            labels = labels or tuple(getattr(collector, "_labelnames", ()))
            name = family.name + ("_total" if family.type == "counter" else "")
            rows.append((name, family.type, labels, family.documentation))
    return sorted(rows)


def metrics() -> str:
    """``docs/metrics.md``: every family a daemon's collectors declare."""
    rows = [
        "# Metrics reference",
        "",
        "Generated from the families the daemon's collectors declare (their `describe()`,",
        "the state collector's included) by `python -m sentinel.reference`; a unit",
        "test fails when this file and the code disagree, and a loopback test",
        "(`tests/loopback/test_metrics_documented.py`) when a live sentinel's `/metrics`",
        "exposes a family this file lacks. The contract names (the ones dashboards and",
        "alerts use) are in `tests/metric_contract.py`; the exporter's series are in",
        "[exporter.md](exporter.md).",
        "",
        "| metric | type | labels | help |",
        "|---|---|---|---|",
    ]
    for name, kind, labels, help_text in declared_families():
        rows.append(
            f"| `{name}` | {kind} | {', '.join(labels) or '-'} | {help_text.replace('|', '/')} |"
        )
    return "\n".join(rows) + "\n"


def verdict() -> str:
    """``docs/verdict.md``: the hang rules as registered, with the path kinds registered now."""
    return verdict_reference(path_kinds())


REFERENCES = {
    "configuration.md": configuration,
    "metrics.md": metrics,
    "verdict.md": verdict,
    "layout.md": layout,
}
