"""The release lines' ``/metrics``: 0.32's exposition reshaped as older lines (or a proxy) show it.

The simulator's registry (:mod:`sentinel_sim.metrics`) holds vLLM 0.32's
families; ``--exposition`` picks the form ``/metrics`` answers with, so a test
can run sentinel against each line's exposition without another simulator.
What differs is what sentinel's reading differs on (the samples are in
:mod:`sentinel.evidence.vllm_releases`); 0.33 and 0.34 changed no family
sentinel reads (``VLLM_RELEASES.md`` section 3), so "0.32" stands for them.
"""

from __future__ import annotations

DEFAULT_EXPOSITION = "0.32"
#: The forms ``/metrics`` can take, oldest first: "0.10" the deprecated
#: ``gpu_cache_usage_perc`` and ``time_per_output_token_seconds`` beside their
#: successors, no waiting-by-reason, admission or sleep-state families; "0.20" (to
#: 0.29) waiting by reason, no admission counter; "0.32" (0.33, 0.34) all of them;
#: "counters" 0.32's behind a relabelling proxy that drops every histogram (no first
#: tokens, no iteration tokens: nothing tells decode from first tokens or shows a step).
EXPOSITIONS = ("0.10", "0.20", "0.32", "counters")
_DROPPED: dict[str, frozenset[str]] = {
    "0.10": frozenset(
        {
            "vllm:num_requests_waiting_by_reason",
            "vllm:admission_rejections",
            "vllm:engine_sleep_state",
        }
    ),
    "0.20": frozenset({"vllm:admission_rejections"}),
}
_RENAMED_010 = {  # 0.10's names for the same series, exposed beside (or instead of) 0.32's
    "vllm:kv_cache_usage_perc": ("vllm:gpu_cache_usage_perc", True),
    "vllm:request_time_per_output_token_seconds": ("vllm:time_per_output_token_seconds", False),
}


def _blocks(text: str) -> list[tuple[str, str, list[str]]]:
    """(declared name, type, lines) per ``# HELP`` block of a text exposition."""
    blocks: list[tuple[str, str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("# HELP "):
            blocks.append((line.split(" ", 3)[2], "", [line]))
        elif blocks:
            name, kind, lines = blocks[-1]
            if line.startswith("# TYPE "):
                kind = line.rsplit(" ", 1)[1]
            lines.append(line)
            blocks[-1] = (name, kind, lines)
    return blocks


def _base(declared: str) -> str:
    """A block's family: its declared name less a counter's ``_total`` or ``_created``."""
    for suffix in ("_total", "_created"):
        if declared.endswith(suffix):
            return declared[: -len(suffix)]
    return declared


def reshape(text: bytes, form: str) -> bytes:
    """0.32's exposition as release line ``form`` shows it (see :data:`EXPOSITIONS`)."""
    if form not in EXPOSITIONS:
        raise ValueError(f"unknown exposition {form!r}; one of {', '.join(EXPOSITIONS)}")
    histograms = {_base(n) for n, kind, _ in _blocks(text.decode()) if kind == "histogram"}
    kept: list[str] = []
    for declared, _, lines in _blocks(text.decode()):
        family = _base(declared)
        if form == "counters" and (family in histograms or declared in histograms):
            continue
        if family in _DROPPED.get(form, frozenset()):
            continue
        if form == "0.10" and family in _RENAMED_010:
            old, keep = _RENAMED_010[family]
            kept.extend(line.replace(family, old) for line in lines)
            if not keep:
                continue
        kept.extend(lines)
    return ("\n".join(kept) + "\n").encode()
