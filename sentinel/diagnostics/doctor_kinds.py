"""``sentinel doctor``'s canary checks: each kind probed with one canary or read from vLLM flags.

What a server can do is read from what it answers (:func:`check_probed_kinds`,
one canary of each kind sent by :mod:`sentinel.diagnostics.checkup`), not
assumed from its command line; a vLLM command line adds what the answers
cannot show (a reasoning parser that makes the structured kind unprovable).
"""

from __future__ import annotations

from collections.abc import Sequence

from sentinel.canary.capability import NOT_A_CAPABILITY
from sentinel.canary.kinds import CONTROL, unvalidatable
from sentinel.canary.outcome import outcome
from sentinel.canary.protocol import ServerFacts
from sentinel.canary.result import CanaryResult
from sentinel.canary.spec import CanaryKind, CanarySpec
from sentinel.diagnostics.doctor import DoctorCheck, Severity, is_vllm
from sentinel.evidence.process_model import reasoning_parser


def check_canary_kinds(
    api_cmdlines: Sequence[Sequence[str]],
    specs: Sequence[CanarySpec],
    probed: Sequence[CanaryResult] | None = None,
) -> list[DoctorCheck]:
    """Pure: which canary kinds will disable themselves on this server, and why.

    The same rule ``sentinel run`` applies (each kind's ``unvalidatable``), on
    the same command-line facts, so the doctor names what the run will log as
    ``canary_kind_disabled``. With ``probed`` (one canary of each kind, sent),
    every other kind is judged on what the server answered
    (:func:`check_probed_kinds`), not assumed.
    """
    vllm = [argv for argv in api_cmdlines if is_vllm(argv)]
    if not vllm and probed is None:
        why = "no vLLM API server visible; cannot tell which canary kinds can be validated"
        return [DoctorCheck("canaries", Severity.SKIPPED, why)]
    found: dict[CanaryKind, str] = {}
    parsers: set[str] = set()
    for argv in vllm:
        facts = ServerFacts(reasoning_parser=reasoning_parser(argv))
        if facts.reasoning_parser is not None:
            parsers.add(facts.reasoning_parser)
        for kind, why in unvalidatable(specs, facts).items():
            found.setdefault(kind, why)
    disabled = [
        DoctorCheck("canaries", Severity.WARN, f"{kind} canaries will disable themselves", why)
        for kind, why in found.items()
    ]
    if probed is not None:
        return disabled + check_probed_kinds([r for r in probed if r.kind not in found])
    if disabled:
        return disabled
    kept = f"--reasoning-parser {', '.join(sorted(parsers))}; " if parsers else ""
    kinds = ", ".join(sorted({s.kind.value for s in specs if s.enabled}))
    ok = "every enabled canary kind can be validated on this server"
    return [DoctorCheck("canaries", Severity.OK, ok, f"{kept}kinds: {kinds}")]


def check_probed_kinds(probed: Sequence[CanaryResult]) -> list[DoctorCheck]:
    """Pure: each kind judged on the one canary the doctor sent, as ``sentinel run`` would.

    Skipped (the server says it cannot: an image refused, no such endpoint)
    and refused with a 4xx are set aside by the run, inconclusive ones too
    after a few; a text canary that fails is a problem (it is the liveness
    proof), another kind's failure a warning (one canary on a short deadline).
    """
    out: list[DoctorCheck] = []
    validated: list[str] = []
    for r in probed:
        state = outcome(r)
        if state == "ok":
            validated.append(r.name)
            continue
        refused = r.http_status is not None and 400 <= r.http_status < 500
        if state == "skipped":
            summary = f"{r.name}: the server cannot do it; sentinel run sets it aside"
        elif state == "inconclusive" or (refused and r.http_status not in NOT_A_CAPABILITY):
            summary = f"{r.name}: {r.reason.value}; sentinel run sets it aside if it stays so"
        else:
            bad = Severity.PROBLEM if r.kind == CONTROL else Severity.WARN
            out.append(
                DoctorCheck("canaries", bad, f"{r.name} canary failed: {r.reason}", r.detail)
            )
            continue
        out.append(DoctorCheck("canaries", Severity.WARN, summary, r.detail))
    if validated:
        ok = f"validated on this server: {', '.join(validated)}"
        out.insert(0, DoctorCheck("canaries", Severity.OK, ok, "one canary each, answered"))
    return out
