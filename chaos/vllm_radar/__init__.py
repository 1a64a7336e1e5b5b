"""The vLLM release radar: what a release changed in the surfaces sentinel reads.

``make vllm-radar VERSION=0.34.0`` downloads that release's wheel (never
installed), reads its Python source with :mod:`ast` (vLLM is never imported),
and lists its HTTP routes, middlewares and the error bodies they answer,
metric families with their labels, process titles and health-relevant flags,
against the table of surfaces sentinel knows (:mod:`chaos.vllm_radar.known`).
The output is the short diff docs/compat-notes.md is made of: what is new,
gone or changed since a base release, and which of those touch sentinel.
"""
