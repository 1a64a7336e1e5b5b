"""The KV-transfer bound: a disaggregated decode node whose transfers never land.

On a decode node of vLLM's prefill/decode disaggregation (NIXL or Mooncake
KV connectors) a request whose KV a prefill worker computed gets its blocks
and waits in ``WAITING_FOR_REMOTE_KVS`` until the transfer lands; vLLM counts
it in ``vllm:num_requests_waiting_by_reason{reason="deferred"}``, neither
running nor generating. A transfer lands in milliseconds to seconds (NIXL's
lease on the prefill side is renewed while the decode side lives); the
decode side itself has no timeout, so transfers that never land (Mooncake's
decode side waiting forever, NIXL notifications lost) leave every routed
request deferred for good, while sentinel's canaries, which carry no
``kv_transfer_params``, are prefilled locally and pass.

So: deferred requests shown in every sample for ``kv_transfer_bound``, no
transfer landing meanwhile (where the server counts landings: the NIXL
connector's ``vllm:nixl_xfer_time_seconds`` observations, or prompt tokens
from ``external_kv_transfer``; otherwise no real progress at all, since a
request that lands runs and decodes), while a canary succeeded, is a hang of
its own kind. A canary that fails too is the engine rule's; a server that does
not count deferred requests has none to judge. Policy ``unready`` by
default: the node serves no routed request, but the fault is as likely on
the prefill side or the transfer network, where restarting every decode node
would fix nothing and spend the pool's restart budget (``docs/design.md``,
"A decode node whose KV transfers never land").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from sentinel.knob import DAY, seconds, setting
from sentinel.verdict.clock import observed
from sentinel.verdict.knobs import Knobs
from sentinel.verdict.model import Action, Evidence, Hang, HangKind
from sentinel.verdict.rule import Gate, HangRule
from sentinel.verdict.sections import SectionKey
from sentinel.verdict.stall import floor


@dataclass(frozen=True, slots=True)
class KvTransferSection:
    """Deferred requests and landed KV transfers, as the ``kv_transfer`` section holds them."""

    counted: bool = False  # the server counts waiting requests by reason "deferred"
    deferred: float = 0.0  # at the newest sample
    deferred_since: float | None = None  # shown deferred in every sample since (None: not now)
    # The counter that tells a landed transfer ("": none exposed; real progress stands in).
    landing: str = ""
    landed_at: float | None = None  # the last sample in which it moved
    failed: float = 0.0  # failed transfers counted since ``deferred_since``


# The evidence section (sentinel.record.kv_transfer).
SECTION: Final = SectionKey("kv_transfer", KvTransferSection)


class KvTransferKnobs(Knobs):
    """The KV-transfer bound's knobs."""

    kv_transfer_bound: float = seconds(
        120.0,
        "Requests deferred waiting for their remote KV (vLLM's waiting-by-reason 'deferred') "
        "in every sample this long, no transfer landing, while canaries pass: the decode "
        "node's KV transfers do not land. Four NIXL leases (30 s): a transfer takes "
        "milliseconds to seconds, a first handshake seconds.",
        1.0,
        DAY,
    )
    kv_transfer_policy: Action = setting(
        Action.UNREADY,
        "What a decode node whose KV transfers never land does: it serves no routed "
        "request, but the fault may be the prefill side's, which no decode restart fixes.",
    )


def kv_transfer_hang(evidence: Evidence, policy: KvTransferKnobs, now: float) -> Hang | None:
    """Deferred requests past the bound, no transfer landing, canaries passing."""
    section = evidence.section(SECTION)
    if section is None or section.deferred_since is None:
        return None
    if section.landing:
        landed: tuple[float | None, ...] = (section.landed_at,)
    else:
        work = evidence.last_decode_at if evidence.decode_available else evidence.last_progress_at
        landed = (work, evidence.last_real_completion_at)
    start = max(section.deferred_since, floor(evidence), *(t for t in landed if t is not None))
    elapsed = observed(start, now, evidence.unobserved)
    if elapsed < policy.kv_transfer_bound:
        return None
    if not any(r.ok and r.finished >= start for k in evidence.enabled for r in k.results):
        return None  # the canaries fail too: the engine's, not the transfers'
    told = f"no {section.landing} moved" if section.landing else "no real progress"
    failed = f", {section.failed:.0f} transfers failed" if section.failed else ""
    return Hang(
        HangKind.KV_TRANSFER,
        policy.kv_transfer_policy,
        f"kv transfers not landing: {section.deferred:.0f} requests deferred waiting for "
        f"their remote KV for {elapsed:.0f}s ({told}{failed}; bound "
        f"{policy.kv_transfer_bound:.0f}s) while canaries pass: the prefill side or the "
        "KV connector may be stuck",
        start,
    )


RULE = HangRule(
    "kv_transfer",
    kv_transfer_hang,
    KvTransferKnobs,
    kinds=(HangKind.KV_TRANSFER,),
    action="kv_transfer_policy",
    windows=("kv_transfer_bound",),
    off_when=frozenset({Gate.STALLED}),
    evidence="requests deferred for their remote KV past the bound, no transfer landing, "
    "while a canary succeeded",
)
