"""Token ids and log-probabilities of the simulated replies, and several prompts per request.

As vLLM 0.32 answers them: ``/v1/completions`` with ``logprobs: N`` gives
``tokens``, ``token_logprobs``, ``top_logprobs`` (the chosen token and up to N
candidates) and ``text_offset``; ``/v1/chat/completions`` with ``logprobs:
true`` gives ``content[]`` entries with ``top_logprobs`` up to
``top_logprobs``. Under ``return_tokens_as_token_ids`` every token is written
``token_id:N``. A completions ``prompt`` list is one choice per prompt, in
order, with usage summed (non-streamed only; a streamed list is refused as
before).

The simulated model is deterministic: word ``j`` of its cycle is token id
``3 + j`` with a log-probability and a lead over its runner-up that depend on
``j`` alone, so a reply's fingerprint is the same on every run. The
corruption faults change that: ``weights_lost`` answers every free-text
prompt with token 0 (``!``) repeated at ``-log(512)``, every candidate tied
(all-zero logits); ``weights_updated`` moves every prompt's reply elsewhere in
the cycle (other weights) and declares its ``version``. Schema-constrained
replies stay valid under both: the grammar forces them. ``no_logprobs`` is a
proxy in front that strips log-probabilities (``logprobs`` null).
``near_ties`` is a GPU's batch variance: every token has close rivals (the
runner-up :data:`TIES` nats behind, then the third, then a far one), and with
``flip`` the second token of each reply is the third candidate (``third``,
within the margin a batch may move) or the far one (``far``, other weights).
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from aiohttp import web

from sentinel_sim.faults import Fault
from sentinel_sim.model import _THOUGHTS, _WORDS, LOST_TOKEN, Reply
from sentinel_sim.server import SimServer

VOCAB = 512
LOST_ID = 0
LOST_LOGPROB = -math.log(VOCAB)
RUNNER_UP = "~"
# Under near_ties: each rival's id offset from the chosen token, and how far it trails.
TIES = ((1, 0.1), (2, 0.3), (3, 2.0))
FLIPPED_AT = 1  # the token a flip changes


def served(reply: Reply, server: SimServer) -> Reply:
    """``reply`` as the corruption faults in force make it (constrained replies untouched)."""
    if reply.fixed is not None:
        return reply
    if server.faults.get(Fault.WEIGHTS_LOST) is not None:
        return replace(reply, lost=True)
    updated = server.faults.get(Fault.WEIGHTS_UPDATED)
    if updated is not None:
        shift = 1 + zlib.crc32(str(updated.params["version"]).encode()) % (len(_WORDS) - 1)
        return replace(reply, offset=(reply.offset + shift) % len(_WORDS))
    return reply


def step(reply: Reply, i: int) -> tuple[int, float, float]:
    """Token ``i`` of ``reply``: its id, its log-probability, its lead over the runner-up."""
    if i < reply.thinking:
        t = i % len(_THOUGHTS)
        return 40 + t, -0.2 - 0.05 * (t % 5), 1.0 + t % 2
    j = i - reply.thinking
    if reply.fixed is not None:
        token = reply.fixed[j] if j < len(reply.fixed) else ""
        return 100 + zlib.crc32(token.encode()) % 400, -0.01, 6.0
    if reply.lost:
        return LOST_ID, LOST_LOGPROB, 0.0
    p = (reply.offset + j) % len(_WORDS)
    return 3 + p, -(0.1 + (p % 7) * 0.15), 1.5 + p % 3


def logprob_options(body: Mapping[str, Any], server: SimServer) -> dict[str, Any] | None:
    """What a request asked of log-probabilities (None: nothing, or a proxy strips them)."""
    asked = body.get("logprobs")
    if asked is None or asked is False or server.faults.get(Fault.NO_LOGPROBS) is not None:
        return None
    ties = server.faults.get(Fault.NEAR_TIES)
    return {
        "logprobs": asked,
        "top_logprobs": body.get("top_logprobs") or 0,
        "as_ids": body.get("return_tokens_as_token_ids") is True,
        "ties": None if ties is None else str(ties.params["flip"]),
    }


def _tied(options: Mapping[str, Any], steps: list[tuple[int, float, float]], i: int) -> Any:
    """Step ``i``'s chosen id and rivals ``[(id, logprob)]`` under ``near_ties`` (None: off)."""
    flip = options.get("ties")
    if flip is None:
        return None
    ident, lp, _ = steps[i]
    if i == FLIPPED_AT and flip != "none":
        ident = (ident + (2 if flip == "third" else 3)) % VOCAB
    return ident, [((ident + k) % VOCAB, lp - trail) for k, trail in TIES]


def logprobs_json(
    options: Mapping[str, Any] | None, reply: Reply, generated: int, *, chat: bool
) -> dict[str, Any] | None:
    """The ``logprobs`` of a non-streamed choice, as vLLM writes them (None: not asked)."""
    if options is None:
        return None
    as_ids = bool(options["as_ids"])
    steps = [step(reply, i) for i in range(generated)]
    texts = [LOST_TOKEN if reply.lost else reply.text(i, i + 1) for i in range(generated)]
    names = [
        f"token_id:{ident}" if as_ids else text
        for (ident, _, _), text in zip(steps, texts, strict=True)
    ]
    runner = [f"token_id:{(ident + 1) % VOCAB}" if as_ids else RUNNER_UP for ident, _, _ in steps]
    if chat:
        top = int(options["top_logprobs"])
        return {
            "content": [
                {
                    "token": name,
                    "logprob": lp,
                    "bytes": list(name.encode()),
                    "top_logprobs": [
                        {"token": n, "logprob": v, "bytes": list(n.encode())}
                        for n, v in ((name, lp), (other, lp - margin))
                    ][:top],
                }
                for name, other, (_, lp, margin) in zip(names, runner, steps, strict=True)
            ]
        }
    count = int(options["logprobs"])
    offsets, at = [], 0
    for text in texts:
        offsets.append(at)
        at += len(text)
    tops = [
        dict([(name, lp), (other, lp - margin)][: count + 1])
        for name, other, (_, lp, margin) in zip(names, runner, steps, strict=True)
    ]
    if as_ids and options.get("ties") is not None:  # near_ties (completions, token ids)
        tied = [_tied(options, steps, i) for i in range(generated)]
        names = [f"token_id:{ident}" for ident, _ in tied]
        tops = [
            dict([(name, lp), *((f"token_id:{r}", v) for r, v in rivals)][: count + 1])
            for name, (_, rivals), (_, lp, _) in zip(names, tied, steps, strict=True)
        ]
    return {
        "text_offset": offsets,
        "token_logprobs": [lp for _, lp, _ in steps],
        "tokens": names,
        "top_logprobs": tops,
    }


async def several_prompts(request: web.Request) -> list[dict[str, Any]] | None:
    """One body per prompt of a non-streamed completions request with a prompt list (or None)."""
    try:
        body = json.loads(await request.read())
    except (ValueError, UnicodeDecodeError):
        return None
    prompts = body.get("prompt") if isinstance(body, dict) else None
    if not isinstance(prompts, list) or len(prompts) < 2 or body.get("stream"):
        return None
    if not all(isinstance(p, str) for p in prompts):
        return None
    return [{**body, "prompt": p} for p in prompts]


def merged(responses: list[web.Response]) -> web.Response:
    """The answers to each prompt as one completions reply; the first failure if any failed."""
    payloads = []
    for response in responses:
        if response.status != 200 or not isinstance(response.body, bytes):
            return response
        payloads.append(json.loads(response.body))
    first = payloads[0]
    choices = []
    for index, payload in enumerate(payloads):
        choice = dict(payload["choices"][0])
        choice["index"] = index
        choices.append(choice)
    usage = dict(first["usage"])
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        usage[key] = sum(int(p["usage"][key]) for p in payloads)
    return web.json_response({**first, "choices": choices, "usage": usage})
