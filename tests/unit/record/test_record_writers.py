"""Nothing but the record writes the ledger (issue 42: a result is recorded once).

The observers, the result sink and the planner (``sentinel/record/``) are the
ledger's only writers; the scheduler and the evaluator say *when* (a canary
left, a step ended, a judgement was made) and read the frozen plan. This walks
the syntax tree of every module outside ``sentinel/record/`` for a call of a
ledger mutator, or an assignment into the ledger, on anything named
``ledger`` (a local, ``self.ledger``, ``x.ledger``). A write through an alias
under another name escapes it; the names in sentinel are this one.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from sentinel.record.ledger import KindRecord, Ledger

ROOT = Path(__file__).resolve().parents[3] / "sentinel"
RECORD = ROOT / "record"

# Every public method and property of the ledger, each in one of these sets: a new one
# must be placed, so a new writer cannot slip in as a read.
MUTATORS = frozenset(
    {
        "new_epoch",
        "observe_traffic",
        "observe_lifecycle",
        "saw_refusal",
        "saw_answer",
        "canary_sent",
        "canary_abandoned",
        "canary_done",
        "canary_late",
        "disable",
        "fall_back",
        "startup_judged",
        "observe_health",
        "observe_processes",
    }
)
READS = frozenset({"api_alive", "canaries_sent", "in_flight", "busy"})
# Freezing advances the refusal runs and the lifecycle word to "now": the evaluator's alone.
FREEZE = frozenset({"evidence"})
FREEZERS = frozenset({Path("evaluation/evaluator.py")})
RECORD_MUTATORS = frozenset({"make_room", "clear"})  # a KindRecord's


def _public(cls: type) -> set[str]:
    return {name for name, _ in inspect.getmembers(cls) if not name.startswith("_")}


def _is_ledger(node: ast.expr) -> bool:
    """``ledger``, ``self.ledger``, ``x.ledger`` (the names the ledger goes by)."""
    if isinstance(node, ast.Name):
        return node.id == "ledger"
    return isinstance(node, ast.Attribute) and node.attr == "ledger"


def _reaches_ledger(node: ast.expr) -> bool:
    """Whether an assignment target is inside the ledger (``ledger.x``, ``ledger.records[k].y``)."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        inner = node.func if isinstance(node, ast.Call) else node.value
        if _is_ledger(inner):
            return True
        node = inner
    return False


def writes(source: str, *, may_freeze: bool = False) -> list[str]:
    """The ledger writes in ``source``: ``line: what``."""
    found: list[tuple[int, str]] = []
    allowed = MUTATORS | RECORD_MUTATORS | (set() if may_freeze else FREEZE)
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.stmt | ast.expr):
            continue
        call = node.func if isinstance(node, ast.Call) else None
        if isinstance(call, ast.Attribute) and call.attr in allowed and _reaches_ledger(call):
            found.append((node.lineno, f"calls {call.attr}"))
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            for part in target.elts if isinstance(target, ast.Tuple) else [target]:
                if isinstance(part, (ast.Attribute, ast.Subscript)) and _reaches_ledger(part):
                    found.append((node.lineno, f"assigns {ast.unparse(part)}"))
    return [f"{line}: {what}" for line, what in sorted(found)]


def test_every_public_ledger_member_is_a_mutator_a_read_or_the_freeze() -> None:
    assert _public(Ledger) - MUTATORS - READS - FREEZE == set()
    assert (MUTATORS | READS | FREEZE) - _public(Ledger) == set()  # no stale names
    assert _public(KindRecord) >= RECORD_MUTATORS


def test_nothing_outside_the_record_writes_the_ledger() -> None:
    offenders = {
        str(path.relative_to(ROOT)): found
        for path in sorted(ROOT.rglob("*.py"))
        if RECORD not in path.parents
        and (
            found := writes(
                path.read_text(encoding="utf-8"),
                may_freeze=path.relative_to(ROOT) in FREEZERS,
            )
        )
    }
    assert offenders == {}


def test_the_walk_finds_each_way_of_writing() -> None:
    source = """
def step(self, ledger, kind):
    self.ledger.disable(kind, "why")
    ledger.canary_done(kind, 1, None, 0.0, epoch=0)
    self.ledger.startup_passed = True
    ledger.records[kind].enabled = False
    ledger.records.get(kind).fallback = "x"
    self.evaluator.ledger.new_epoch("r", 0.0)
    ledger.records[kind].clear()
    ledger.evidence(0.0, 1.0)
    ledger.busy(0.0, 1.0)  # a read
    self.sink.record(kind)  # the record's own door
"""
    assert [line.split(": ")[1] for line in writes(source)] == [
        "calls disable",
        "calls canary_done",
        "assigns self.ledger.startup_passed",
        "assigns ledger.records[kind].enabled",
        "assigns ledger.records.get(kind).fallback",
        "calls new_epoch",
        "calls clear",
        "calls evidence",
    ]
    assert "calls evidence" not in " ".join(writes(source, may_freeze=True))
