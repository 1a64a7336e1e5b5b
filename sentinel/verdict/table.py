"""``docs/verdict.md``: the rules as operators meet them, one row per registered rule.

Written from the registry (:mod:`sentinel.verdict.registry`): each rule's
kinds, what it reads, the knobs that time it with their defaults, the knob
holding its action with its default, and the states that turn it off; then
the readiness words rules own, in the order readiness asks them. The
reasoning behind each rule stays in ``docs/design.md``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sentinel.knob import span_of
from sentinel.verdict.knobs import Knobs
from sentinel.verdict.registry import RULES
from sentinel.verdict.rule import HangRule, Point

INTRO = """\
# How sentinel decides, rule by rule

Generated from the hang-rule registry (`sentinel/verdict/registry.py`, one
module per rule under `sentinel/verdict/hangs/`) by
`python -m sentinel.reference`; the reasoning behind each rule is in
[design.md](design.md). Every window is a setting of the same name
([configuration.md](configuration.md)); time sentinel itself did not run is
left out of every window, which pauses and resumes instead of starting over.

Liveness fails only while a hang whose action is `restart` is confirmed
(enforcing, the restart-loop brake off, the pool's restart budget open);
`unready` fails readiness only, `alert` reports. Rules are judged in the
order below.

| kind | confirmed when | window (default) | action (default) | off when |
|---|---|---|---|---|
"""

OUTRO = """
**Readiness** fails until every enabled canary kind succeeded in this server
epoch (naming the kinds it waits on), on any confirmed `restart` or `unready`
hang (unless observe-only, `enforce: false`), while asleep or paused (with
the reason), after a wake-up or resume until every canary kind passed again,
while the restart-loop brake is engaged or the restart budget holds a
restart, and while recent canaries fail or run over their latency SLO (out
after `ready_out_after` bad results, back after `ready_back_after` good
ones). **Startup** passes once the text canary succeeded in this server
epoch (the server serves; without a text kind, every kind), and stays
passed. **The restart-loop brake**: a hang restart
that would be the `brake_max_restarts`+1-th within `brake_window` keeps
liveness green, turns readiness red and says so; when each of those
restarts ended in the same cause (the hang kind and its engine, rank or
path), readiness also says a restart does not fix it and names the pod's node
(docs/fleet.md). A new server epoch (the server's identity changed) resets
everything but the brake's memory.
"""


def _value(knobs: type[Knobs], name: str) -> str:
    """A knob's default as the table shows it: ``15 s``, ``2 canaries``, ``restart``, ``unset``."""
    field = knobs.model_fields.get(name)
    value = None if field is None else field.default
    if value is None:
        return "unset"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(getattr(value, "value", value))
    span = span_of(knobs, name)
    return f"{value:g}" + ("" if span is None else f" {span.unit}")


def _row(rule: HangRule[Any], paths: Iterable[str]) -> str:
    kinds = [f"`{p}`" for p in paths] if rule.per_path else [f"`{k.value}`" for k in rule.kinds]
    windows = ", ".join(f"`{name}` ({_value(rule.knobs, name)})" for name in rule.windows)
    if rule.action:
        action = f"`{rule.action}` ({_value(rule.knobs, rule.action)})"
    elif rule.per_path:
        action = "each kind's `policy` (restart)"
    else:
        action = "fixed by the rule"
    off = ", ".join(sorted(g.value for g in rule.off_when)) or "never"
    cells = (", ".join(kinds) or "-", rule.evidence, windows or "-", action, off)
    return "| " + " | ".join(c.replace("|", "/") for c in cells) + " |"


def _words() -> str:
    """The readiness words rules own, in the order readiness asks them (empty: none)."""
    rows = [
        f"| `{rule.name}` | {at.value} | {rule.readiness.says} |"
        for at in Point
        for rule in RULES.values()
        if rule.readiness is not None and rule.readiness.at is at
    ]
    if not rows:
        return ""
    head = (
        "\nA rule that owns a state readiness names answers for it, asked in this\n"
        "order (the first answer wins):\n\n| rule | asked | readiness |\n|---|---|---|\n"
    )
    return head + "\n".join(rows) + "\n"


def verdict_reference(paths: Iterable[str]) -> str:
    """The whole ``docs/verdict.md``; ``paths`` are the registered path canary kinds."""
    names = tuple(paths)
    rows = [_row(rule, names) for rule in RULES.values()]
    return INTRO + "\n".join(rows) + "\n" + _words() + OUTRO
