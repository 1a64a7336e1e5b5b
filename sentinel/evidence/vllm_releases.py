"""What each vLLM release line exposes to sentinel: metric samples, process titles, fields.

sentinel reads vLLM from outside (``/metrics``, process titles, request fields),
and each of those changed across releases. This module is the data: one
:class:`ReleaseFacts` per release line, read from that release's source and,
where it runs on the CPU backend here, from a live server (docs/compat-notes.md
says which). :func:`recognise` tells from one exposition which lines fit and
which sample feeds each progress signal, so that a reader never treats a
renamed metric as a flat one.

The signal keys are those of :mod:`sentinel.evidence.metrics`
(``generation_tokens``, ``engine_tokens``, ``running`` ...). Sample names are the
exposed ones: a counter declared ``vllm:generation_tokens`` is exposed as
``vllm:generation_tokens_total``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

#: Signal -> sample, the same in every V1 release from 0.9 to 0.32.
_V1_SIGNALS: Mapping[str, str] = MappingProxyType(
    {
        "generation_tokens": "vllm:generation_tokens_total",
        "prompt_tokens": "vllm:prompt_tokens_total",
        "engine_tokens": "vllm:iteration_tokens_total_sum",
        "preemptions": "vllm:num_preemptions_total",
        "completions": "vllm:request_success_total",
        # The count of vLLM's TTFT histogram (PrometheusStatLogger,
        # ``vllm:time_to_first_token_seconds``, in every V1 line): one per
        # request that got its first token. Generated tokens beyond it are decoded.
        "first_tokens": "vllm:time_to_first_token_seconds_count",
        "running": "vllm:num_requests_running",
        "waiting": "vllm:num_requests_waiting",
        "kv_cache_usage": "vllm:kv_cache_usage_perc",
    }
)


@dataclass(frozen=True, slots=True)
class ReleaseFacts:
    """One vLLM release line as sentinel sees it from outside.

    ``markers`` are samples only this line (and its neighbours) expose and
    ``absent`` samples it never exposes; :func:`recognise` uses both to tell
    lines apart, since the progress samples themselves did not change.
    ``engine_title``/``worker_title`` are full process titles (``None``: the
    release sets none, the processes keep Python's command line); the kernel's
    15-character ``comm`` cuts ``VLLM::EngineCore`` to ``VLLM::EngineCor``, so a
    rank suffix (``_TP1``, ``_DP0``) is only in the command line.
    """

    line: str
    checked: str
    signals: Mapping[str, str]
    markers: frozenset[str] = frozenset()
    absent: frozenset[str] = frozenset()
    engine_label: bool = True
    engine_title: str | None = "VLLM::EngineCore"
    worker_title: str | None = "VLLM::Worker"
    #: Suffix added per data-parallel engine / tensor-parallel rank.
    dp_suffix: str = "_DP{rank}"
    tp_suffix: str = "_TP{rank}"
    #: Request fields that constrain output (honoured ones only).
    structured_fields: tuple[str, ...] = ("response_format", "structured_outputs")
    #: Fields accepted but ignored (200, unconstrained output): never use.
    ignored_fields: tuple[str, ...] = ()
    priority_policy: bool = True
    #: Server flags the CPU backend needs for sentinel's canaries to work (measured).
    server_flags: tuple[str, ...] = ()
    #: Where the chaos plugin's engine-step hook sits.
    engine_step_hook: str = "vllm.v1.engine.core.EngineCoreProc._process_engine_step"
    notes: tuple[str, ...] = field(default_factory=tuple)


RELEASES: tuple[ReleaseFacts, ...] = (
    ReleaseFacts(
        line="0.9",
        checked="0.9.2 (source only: pins torch 2.6.0+cpu)",
        signals=_V1_SIGNALS,
        markers=frozenset(
            {"vllm:gpu_cache_usage_perc", "vllm:time_per_output_token_seconds_count"}
        ),
        absent=frozenset({"vllm:inter_token_latency_seconds_count"}),
        engine_title=None,
        worker_title=None,
        structured_fields=("response_format", "guided_json", "guided_choice"),
        ignored_fields=("structured_outputs",),
        notes=(
            "no process titles: EngineCore_<i> and VllmWorker-<rank> are multiprocessing "
            "names only, so processes are told apart by parentage",
            "grammar hook is StructuredOutputManager._async_create_grammar",
            "no metric tells 0.9 from 0.10 but inter_token_latency_seconds (0.10 on)",
        ),
    ),
    ReleaseFacts(
        line="0.10",
        checked="0.10.2 (live, CPU backend, on the plain torch 2.6.0 of its pin)",
        signals=_V1_SIGNALS,
        markers=frozenset(
            {
                "vllm:gpu_cache_usage_perc",
                "vllm:time_per_output_token_seconds_count",
                "vllm:inter_token_latency_seconds_count",
            }
        ),
        # Live, by the nonce rule: the guided_* fields and response_format constrain
        # the reply; structured_outputs (0.11 on) is accepted and ignored.
        structured_fields=("response_format", "guided_json", "guided_choice"),
        ignored_fields=("structured_outputs",),
        # In its default bfloat16 on the CPU, xgrammar's bitmask kernel raises "logits
        # must be of type float32" on the first structured request and EngineCore dies.
        server_flags=("--dtype", "float32"),
        notes=(
            "grammar hook is StructuredOutputManager._async_create_grammar",
            "single process on the CPU backend (uniproc executor): VLLM::EngineCore "
            "runs the model, there is no VLLM::Worker",
        ),
    ),
    ReleaseFacts(
        line="0.20",
        checked="0.20.2 (live, CPU backend, on the plain torch 2.11.0 of its pin)",
        signals=_V1_SIGNALS,
        markers=frozenset({"vllm:num_requests_waiting_by_reason"}),
        absent=frozenset({"vllm:gpu_cache_usage_perc", "vllm:admission_rejections_total"}),
        ignored_fields=("guided_json", "guided_choice"),
        notes=("exposes the same metric names as 0.27: the two are not told apart",),
    ),
    ReleaseFacts(
        line="0.27",
        checked="0.27.1 (live, CPU backend)",
        signals=_V1_SIGNALS,
        markers=frozenset({"vllm:num_requests_waiting_by_reason"}),
        absent=frozenset({"vllm:gpu_cache_usage_perc", "vllm:admission_rejections_total"}),
        ignored_fields=("guided_json", "guided_choice"),
    ),
    ReleaseFacts(
        line="0.29",
        checked="0.29.0 (live, CPU backend)",
        signals=_V1_SIGNALS,
        markers=frozenset({"vllm:num_requests_waiting_by_reason"}),
        absent=frozenset({"vllm:gpu_cache_usage_perc", "vllm:admission_rejections_total"}),
        ignored_fields=("guided_json", "guided_choice"),
        notes=("exposes the same metric names as 0.20 and 0.27 (live)",),
    ),
    ReleaseFacts(
        line="0.32",
        checked="0.32.0 (live, CPU backend)",
        signals=_V1_SIGNALS,
        markers=frozenset(
            {"vllm:num_requests_waiting_by_reason", "vllm:admission_rejections_total"}
        ),
        absent=frozenset({"vllm:gpu_cache_usage_perc"}),
        ignored_fields=("guided_json", "guided_choice"),
    ),
)

BY_LINE: Mapping[str, ReleaseFacts] = MappingProxyType({r.line: r for r in RELEASES})


@dataclass(frozen=True, slots=True)
class Recognition:
    """What one exposition says about the release behind it.

    ``lines`` are the release lines consistent with it, oldest first (empty when
    it is not vLLM's). ``signals`` maps each progress signal to the sample
    present for it; ``missing`` lists the signals none of those lines' samples
    cover here (disabled or renamed: no evidence, never zero).
    """

    lines: tuple[str, ...]
    signals: Mapping[str, str]
    missing: tuple[str, ...]
    engines: tuple[str, ...]


def recognise(sample_names: Iterable[str], engines: Iterable[str] = ()) -> Recognition:
    """Which release lines fit the ``vllm:`` sample names of one scrape.

    ``engines`` are the ``engine`` label values seen (one per data-parallel
    engine); they are passed through sorted so that a caller reads per-engine
    progress from the same recognition.
    """
    present = frozenset(sample_names)
    if not any(name.startswith("vllm:") for name in present):
        return Recognition(lines=(), signals={}, missing=(), engines=())
    fitting = [
        release
        for release in RELEASES
        if release.markers <= present and not release.absent & present
    ]
    # Markers are a heuristic (a metric can be switched off): fall back to every
    # line rather than to none, since the signal samples agree across lines.
    candidates = fitting or list(RELEASES)
    signals: dict[str, str] = {}
    for release in candidates:
        for signal, sample in release.signals.items():
            if sample in present:
                signals.setdefault(signal, sample)
    every_signal = {signal for release in candidates for signal in release.signals}
    return Recognition(
        lines=tuple(release.line for release in fitting),
        signals=MappingProxyType(signals),
        missing=tuple(sorted(every_signal - set(signals))),
        engines=tuple(sorted(set(engines), key=lambda e: (len(e), e))),
    )
