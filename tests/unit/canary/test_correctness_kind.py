"""The correctness kind: what it sends, what it reads back, and when a reply can be judged.

Token ids come from vLLM's ``token_id:N`` placeholders (or ``token_ids``),
log-probabilities and each token's lead over its runner-up from
``logprobs``; the kind checks them against the prompts sent and ``usage``.
The catalog takes a list of prompts for ``/v1/completions``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from sentinel.canary.catalog import CatalogError, load_catalog
from sentinel.canary.correctness import CANARY, CORRECTNESS, TOP_LOGPROBS, prompts_of
from sentinel.canary.kinds import KINDS, is_path
from sentinel.canary.protocol import NONCE_FIELD, CanaryRequest, Reply
from sentinel.canary.replies import generations_of, parse_reply
from sentinel.canary.result import Generation, Reason
from sentinel.canary.spec import CHAT_ENDPOINT, COMPLETIONS_ENDPOINT, CanarySpec

PROMPTS = ["1, 2, 3,", "The capital of France is"]


def spec(endpoint: str = COMPLETIONS_ENDPOINT, **request: Any) -> CanarySpec:
    body: dict[str, Any] = {"prompt": PROMPTS, "max_tokens": 4, "temperature": 0.7}
    if endpoint == CHAT_ENDPOINT:
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    return CanarySpec("correctness", CORRECTNESS, endpoint, {**body, **request})


def completion_choice(index: int, ids: list[int], values: list[Any]) -> dict[str, Any]:
    tokens = [f"token_id:{i}" for i in ids]
    top = [
        {t: v, f"token_id:{i + 1}": v - 1.5} for t, i, v in zip(tokens, ids, values, strict=True)
    ]
    return {
        "index": index,
        "text": "x" * len(ids),
        "logprobs": {"tokens": tokens, "token_logprobs": values, "top_logprobs": top},
        "finish_reason": "length",
    }


def completion(*choices: dict[str, Any], completion_tokens: int | None = None) -> dict[str, Any]:
    used = sum(len(c["logprobs"]["tokens"]) for c in choices)
    return {
        "choices": list(choices),
        "usage": {"prompt_tokens": 9, "completion_tokens": completion_tokens or used},
    }


def test_registered_not_a_path_kind() -> None:
    assert KINDS[CORRECTNESS] is CANARY
    assert not is_path(CORRECTNESS)


def test_build_asks_greedy_with_token_ids_and_logprobs() -> None:
    sent = CANARY.build(spec(), model="m", nonce="abcd")
    body = sent.body
    assert body["temperature"] == 0
    assert body["logprobs"] == TOP_LOGPROBS == 5  # every close rival, not one runner-up
    assert body["return_tokens_as_token_ids"] is True
    assert body["prompt"] == PROMPTS
    assert body[NONCE_FIELD].endswith("abcd")  # the only field that varies per run
    again = CANARY.build(spec(), model="m", nonce="ffff").body
    assert {k: v for k, v in body.items() if k != NONCE_FIELD} == {
        k: v for k, v in again.items() if k != NONCE_FIELD
    }
    chat = CANARY.build(spec(CHAT_ENDPOINT), model="m", nonce="abcd").body
    assert chat["logprobs"] is True
    assert chat["top_logprobs"] == TOP_LOGPROBS


def test_completions_reply_parses_ids_logprobs_margins_and_runner_ups() -> None:
    payload = completion(
        completion_choice(1, [7, 8], [-0.5, -0.25]), completion_choice(0, [3, 4], [-0.1, -0.2])
    )
    reply = parse_reply(payload, chat=False)
    assert reply.generations == (
        Generation((3, 4), (-0.1, -0.2), (1.5, 1.5), (4, 5), (((4, 1.5),), ((5, 1.5),))),
        Generation((7, 8), (-0.5, -0.25), (1.5, 1.5), (8, 9), (((8, 1.5),), ((9, 1.5),))),
    )


def test_every_listed_candidate_is_kept_best_first_with_its_lead() -> None:
    top = {"token_id:3": -0.1, "token_id:9": -0.5, "token_id:4": -0.3, "token_id:7": -4.0}
    choice = {
        "index": 0,
        "text": "x",
        "logprobs": {"tokens": ["token_id:3"], "token_logprobs": [-0.1], "top_logprobs": [top]},
    }
    (generation,) = generations_of([choice])
    assert generation.runner_ups == (4,)
    assert generation.margins[0] == pytest.approx(0.2)
    assert [ident for ident, _ in generation.candidates[0]] == [4, 9, 7]
    assert [lead for _, lead in generation.candidates[0]] == pytest.approx([0.2, 0.4, 3.9])


def test_chat_reply_parses_logprobs_content() -> None:
    step = {
        "token": "token_id:5",
        "logprob": -0.3,
        "top_logprobs": [
            {"token": "token_id:5", "logprob": -0.3},
            {"token": "token_id:6", "logprob": -2.3},
        ],
    }
    choice = {"index": 0, "message": {"content": "hi"}, "logprobs": {"content": [step]}}
    reply = parse_reply({"choices": [choice], "usage": {"completion_tokens": 1}}, chat=True)
    (generation,) = reply.generations
    assert generation.token_ids == (5,)
    assert generation.runner_ups == (6,)
    assert generation.margins[0] == pytest.approx(2.0)


@pytest.mark.parametrize(
    "logprobs",
    [
        None,
        {"tokens": ["ok"], "token_logprobs": [-0.1]},  # text tokens, no ids
        {"tokens": ["token_id:1"], "token_logprobs": [None]},  # no log-probability
        {"tokens": ["token_id:1"], "token_logprobs": [True]},
        {"tokens": ["token_id:1", "token_id:2"], "token_logprobs": [-0.1]},
        {"tokens": ["token_id:99999999999"], "token_logprobs": [-0.1]},
        "garbage",
    ],
)
def test_replies_without_usable_ids_or_logprobs_give_nothing(logprobs: Any) -> None:
    assert generations_of([{"index": 0, "text": "x", "logprobs": logprobs}]) == ()


def test_nan_log_probabilities_are_kept_as_nan() -> None:
    (generation,) = generations_of([completion_choice(0, [1], [math.nan])])
    assert math.isnan(generation.logprobs[0])


def test_judge_passes_a_judgeable_reply() -> None:
    sent = CANARY.build(spec(), model="m", nonce="n")
    payload = completion(completion_choice(0, [1], [-0.1]), completion_choice(1, [2], [-0.2]))
    judged = CANARY.judge(sent, parse_reply(payload, chat=False), baseline_prompt_tokens=None)
    assert judged.reason is Reason.OK


def test_judge_without_ids_is_unsupported_so_the_kind_disables_itself() -> None:
    sent = CANARY.build(spec(), model="m", nonce="n")
    reply = Reply(text="hello", completion_tokens=2)
    judged = CANARY.judge(sent, reply, baseline_prompt_tokens=None)
    assert judged.reason is Reason.UNSUPPORTED


def test_judge_refuses_a_reply_that_disagrees_with_the_prompts_or_usage() -> None:
    sent = CANARY.build(spec(), model="m", nonce="n")
    one = parse_reply(completion(completion_choice(0, [1], [-0.1])), chat=False)
    assert CANARY.judge(sent, one, baseline_prompt_tokens=None).reason is Reason.BAD_BODY
    two = completion(
        completion_choice(0, [1], [-0.1]), completion_choice(1, [2], [-0.2]), completion_tokens=7
    )
    judged = CANARY.judge(sent, parse_reply(two, chat=False), baseline_prompt_tokens=None)
    assert judged.reason is Reason.BAD_BODY
    assert "usage" in judged.detail


def test_judge_empty_reply_is_empty() -> None:
    sent = CanaryRequest(body={"prompt": PROMPTS}, nonce="n")
    judged = CANARY.judge(sent, Reply(text="", completion_tokens=0), baseline_prompt_tokens=None)
    assert judged.reason is Reason.EMPTY


def test_prompts_of() -> None:
    assert prompts_of({"prompt": "a"}) == ("a",)
    assert prompts_of({"prompt": ["a", "b"]}) == ("a", "b")
    assert prompts_of({"messages": []}) == ("messages",)


def test_shipped_catalog_has_a_correctness_check_on_completions() -> None:
    (check,) = load_catalog().of_kind(CORRECTNESS)
    assert check.endpoint == COMPLETIONS_ENDPOINT
    assert len(prompts_of(check.request)) >= 2


@pytest.mark.parametrize("prompt", [[], ["ok", ""], ["ok", 3], ["p"] * 9])
def test_catalog_refuses_a_bad_prompt_list(tmp_path: Path, prompt: Any) -> None:
    import yaml

    (tmp_path / "text.yaml").write_text(
        yaml.safe_dump(
            {
                "kind": "text",
                "request": {"messages": [{"role": "user", "content": "x"}], "max_tokens": 1},
            }
        )
    )
    (tmp_path / "c.yaml").write_text(
        yaml.safe_dump(
            {
                "kind": "correctness",
                "endpoint": COMPLETIONS_ENDPOINT,
                "request": {"prompt": prompt, "max_tokens": 4},
            }
        )
    )
    with pytest.raises(CatalogError, match=r"request\.prompt"):
        load_catalog(tmp_path)
