"""The work counters: which sampled signals are progress, and the ones derived from them.

Progress is completed work (docs/design.md, "Verdict semantics"): tokens
generated, prompts prefilled, tokens processed by engine steps, completions.
Decode, which new arrivals cannot fake, is derived where the server counts
first tokens and finished requests by their length.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

RAW_COUNTERS = ("generation_tokens", "prompt_tokens", "engine_tokens", "completions")
"""The exposed counters that are progress; all of them go down together on a restart."""

DECODE_TOKENS = "decode_tokens"
"""Generated tokens beyond each request's first: derived, present only with a first-token count."""

DECODE_COMPLETIONS = "decode_completions"
"""Finished requests that generated more than one token: derived from vLLM's histogram."""

WORK_COUNTERS = (*RAW_COUNTERS, DECODE_TOKENS, DECODE_COMPLETIONS)
"""The counters that are progress; every other sampled signal is motion at best."""

DECODE_COUNTERS = (DECODE_TOKENS, "completions")
"""The progress only an engine whose decode works can make (prefills and first tokens are not).

Completions count here only where the server gives no generation-length
histogram: where it does, only completions past their first token
(:data:`DECODE_COMPLETIONS`) vouch, since one-token requests (classifiers,
scorers) keep completing on an engine whose decode is stuck.
"""


def decode_moved(moved: Iterable[str], present: Mapping[str, float]) -> bool:
    """Decode progress among ``moved`` (``present``: the sample's work counters)."""
    keys = (DECODE_TOKENS, DECODE_COMPLETIONS) if DECODE_COMPLETIONS in present else DECODE_COUNTERS
    return any(k in keys for k in moved)


def work_counters(counters: Mapping[str, float]) -> dict[str, float]:
    """The work counters of one sample, with decoded tokens derived where first tokens are counted.

    vLLM counts a request's first token among its generated tokens and once
    in its TTFT histogram, in the same engine step, so the difference is the
    tokens decoded after the first (never below 0, should a scrape land
    between the two updates).
    """
    work = {k: v for k, v in counters.items() if k in RAW_COUNTERS}
    generated, first = counters.get("generation_tokens"), counters.get("first_tokens")
    if generated is not None and first is not None:
        work[DECODE_TOKENS] = max(generated - first, 0.0)
    finished, one = counters.get("finished"), counters.get("finished_one_token")
    if finished is not None and one is not None:
        work[DECODE_COMPLETIONS] = max(finished - one, 0.0)
    return work
