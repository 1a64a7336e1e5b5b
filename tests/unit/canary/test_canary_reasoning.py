"""Reasoning models: canaries ask for no thinking, judge thinking-only replies, and a kind
a reasoning parser makes unvalidatable disables itself (run, evaluator, doctor)."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
import structlog
import yaml
from prometheus_client import CollectorRegistry

from sentinel.canary import kinds
from sentinel.canary.catalog import CatalogError, load_catalog
from sentinel.canary.kinds import KINDS
from sentinel.canary.protocol import Reply, ServerFacts
from sentinel.canary.replies import parse_reply
from sentinel.canary.result import Reason
from sentinel.canary.runner import CanaryRunner
from sentinel.canary.spec import COMPLETIONS_ENDPOINT, CanaryKind, CanarySpec
from sentinel.config.settings import Settings
from sentinel.diagnostics.doctor import Severity
from sentinel.diagnostics.doctor_kinds import check_canary_kinds
from sentinel.evaluation.evaluator import Evaluator
from sentinel.evaluation.health import HealthState
from sentinel.evaluation.incidents import IncidentRecorder
from sentinel.evidence.process_model import (
    ProcessInfo,
    ProcessRole,
    ProcessSnapshot,
    ProcessState,
    reasoning_parser,
)
from sentinel.record.ledger import Ledger
from sentinel.record.observers import Observations
from sentinel.telemetry.metrics import SentinelMetrics
from sentinel.verdict import Action

CATALOG = load_catalog()
STRUCTURED = CATALOG.get("structured")
NONCE = "abc12345"


def build(name: str, **changes: Any) -> dict[str, Any]:
    spec = replace(CATALOG.get(name), **changes)
    return dict(KINDS[spec.kind].build(spec, model="m", nonce=NONCE).body)


# -- every chat canary asks for no thinking ----------------------------------


@pytest.mark.parametrize("name", ["text", "structured", "multimodal"])
def test_every_chat_canary_asks_the_template_not_to_think(name: str) -> None:
    assert build(name)["chat_template_kwargs"] == {"enable_thinking": False}


def test_the_multimodal_baseline_renders_the_prompt_the_same_way() -> None:
    spec = CATALOG.get("multimodal")
    sent = KINDS[spec.kind].build(spec, model="m", nonce=NONCE)
    assert sent.baseline_body is not None
    assert sent.baseline_body["chat_template_kwargs"] == {"enable_thinking": False}


def test_completions_canaries_have_no_chat_template_to_ask() -> None:
    request = {"prompt": "Say ok.", "max_tokens": 2}
    for name in ("text", "structured"):
        body = build(name, endpoint=COMPLETIONS_ENDPOINT, request=request)
        assert "chat_template_kwargs" not in body


def test_template_kwargs_of_the_template_are_kept_and_its_own_enable_thinking_wins() -> None:
    text = CATALOG.get("text")
    request = {**text.request, "chat_template_kwargs": {"reasoning_effort": "low"}}
    assert build("text", request=request)["chat_template_kwargs"] == {
        "enable_thinking": False,
        "reasoning_effort": "low",
    }
    request = {**text.request, "chat_template_kwargs": {"enable_thinking": True}}
    assert build("text", request=request)["chat_template_kwargs"] == {"enable_thinking": True}
    assert text.request.get("chat_template_kwargs") is None  # the template is not mutated


# -- judging thinking-only replies ---------------------------------------------

THOUGHT = "<think>the user wants"
REASONING_JUDGEMENTS: list[tuple[str, str, Reply, int | None, Reason]] = [
    (
        "text thought cut at max_tokens: the engine generated",
        "text",
        Reply(text="", reasoning=THOUGHT, completion_tokens=2, finish_reason="length"),
        None,
        Reason.OK,
    ),
    (
        "text thought that stopped",
        "text",
        Reply(text="", reasoning=THOUGHT, completion_tokens=3, finish_reason="stop"),
        None,
        Reason.OK,
    ),
    (
        "text thought, zero tokens counted",
        "text",
        Reply(text="", reasoning=THOUGHT, completion_tokens=0, finish_reason="stop"),
        None,
        Reason.EMPTY,
    ),
    (
        "text answered after thinking, cut",
        "text",
        Reply(text="ok", reasoning=THOUGHT, completion_tokens=2, finish_reason="length"),
        None,
        Reason.OK,
    ),
    (
        "structured thought cut at max_tokens",
        "structured",
        Reply(text="", reasoning=THOUGHT, completion_tokens=32, finish_reason="length"),
        None,
        Reason.INCONCLUSIVE,
    ),
    (
        "structured thought that stopped: the grammar never ran",
        "structured",
        Reply(text="", reasoning=THOUGHT, completion_tokens=5, finish_reason="stop"),
        None,
        Reason.INCONCLUSIVE,
    ),
    (
        "structured answer after thinking",
        "structured",
        Reply(text=f'"ok-{NONCE}"', reasoning=THOUGHT, completion_tokens=9),
        None,
        Reason.OK,
    ),
    (
        "structured wrong answer after thinking",
        "structured",
        Reply(text='"ok"', reasoning=THOUGHT, completion_tokens=9),
        None,
        Reason.SCHEMA,
    ),
    (
        "multimodal thought cut at max_tokens",
        "multimodal",
        Reply(
            text="",
            reasoning=THOUGHT,
            prompt_tokens=30,
            completion_tokens=2,
            finish_reason="length",
        ),
        14,
        Reason.INCONCLUSIVE,
    ),
    (
        "multimodal thought that stopped, image consumed",
        "multimodal",
        Reply(
            text="", reasoning=THOUGHT, prompt_tokens=30, completion_tokens=2, finish_reason="stop"
        ),
        14,
        Reason.OK,
    ),
]


@pytest.mark.parametrize(
    ("name", "reply", "baseline", "reason"),
    [pytest.param(n, r, b, want, id=i) for i, n, r, b, want in REASONING_JUDGEMENTS],
)
def test_reasoning_judgement(name: str, reply: Reply, baseline: int | None, reason: Reason) -> None:
    spec = CATALOG.get(name)
    sent = KINDS[spec.kind].build(spec, model="m", nonce=NONCE)
    judgement = KINDS[spec.kind].judge(sent, reply, baseline_prompt_tokens=baseline)
    assert judgement.reason is reason
    assert (judgement.detail == "") == (reason is Reason.OK)


def chat_reply(message: dict[str, Any], finish: str, completion_tokens: int) -> dict[str, Any]:
    usage = {"prompt_tokens": 5, "completion_tokens": completion_tokens}
    choice = {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}
    return {"choices": [choice], "usage": usage}


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content"])
def test_a_reply_s_reasoning_is_read_under_either_name(field: str) -> None:
    reply = parse_reply(chat_reply({"content": None, field: THOUGHT}, "length", 2), chat=True)
    assert (reply.text, reply.reasoning, reply.reasoning_only) == ("", THOUGHT, True)


def sse(*chunks: Any) -> bytes:
    return ("".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n").encode()


def delta(finish: str | None = None, **fields: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": fields, "finish_reason": finish}]}


USAGE = {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}


async def run_against(spec: CanarySpec, answer: httpx.Response) -> tuple[Reason, int | None]:
    async with httpx.AsyncClient(transport=httpx.MockTransport(lambda _: answer)) as client:
        result = await CanaryRunner(client, "http://t.invalid").run(spec, model="m", deadline=5)
    return result.reason, result.tokens_received


@pytest.mark.parametrize(
    ("kind", "finish", "reason"),
    [
        ("structured", "length", Reason.INCONCLUSIVE),
        ("text", "length", Reason.OK),
        ("text", "stop", Reason.OK),
    ],
)
async def test_a_streamed_thought_is_judged_and_counts_as_generated(
    kind: str, finish: str, reason: Reason
) -> None:
    body = sse(
        delta(role="assistant", content=None),
        delta(reasoning_content="<think>"),
        delta(finish, reasoning_content="hmm"),
        USAGE,
    )
    answer = httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})
    spec = replace(CATALOG.get(kind), stream=True)
    assert await run_against(spec, answer) == (reason, 2)


@pytest.mark.parametrize(
    ("kind", "finish", "reason"),
    [
        ("structured", "length", Reason.INCONCLUSIVE),
        ("text", "length", Reason.OK),
        ("text", "stop", Reason.OK),
    ],
)
async def test_a_thought_in_one_reply_is_judged(kind: str, finish: str, reason: Reason) -> None:
    answer = httpx.Response(200, json=chat_reply({"content": None, "reasoning": "x"}, finish, 2))
    spec = replace(CATALOG.get(kind), stream=False)
    assert (await run_against(spec, answer))[0] is reason


# -- the reasoning parser, read from the command line -----------------------------

COMMAND_LINES: list[tuple[list[str], str | None]] = [
    (["vllm", "serve", "m", "--reasoning-parser", "qwen3"], "qwen3"),
    (["python", "-m", "vllm.entrypoints.openai.api_server", "--reasoning_parser=r1"], "r1"),
    (["sh", "-c", "vllm serve m --enable-reasoning --reasoning-parser deepseek_r1"], "deepseek_r1"),
    (["vllm", "serve", "m", "--reasoning-parser", "a", "--reasoning-parser", "b"], "b"),
    (["vllm", "serve", "m", "--structured-outputs-config.reasoning_parser", "glm45"], "glm45"),
    (
        ["vllm", "serve", "m", "--structured-outputs-config", '{"reasoning_parser": "qwen3"}'],
        "qwen3",
    ),
    (["vllm", "serve", "m", "--enable-reasoning"], None),  # names no parser (0.8 refused it)
    (["vllm", "serve", "m", "--reasoning-parser", "--port", "8000"], None),
    (["vllm", "serve", "m", "--reasoning-parser="], None),
    (["vllm", "serve", "m", "--tool-call-parser", "hermes"], None),
]


@pytest.mark.parametrize(("cmdline", "expected"), COMMAND_LINES)
def test_reasoning_parser_from_a_command_line(cmdline: list[str], expected: str | None) -> None:
    assert reasoning_parser(cmdline) == expected


# -- a kind that cannot be validated on this server ---------------------------------


def test_the_structured_kind_cannot_be_validated_behind_a_reasoning_parser() -> None:
    probe = KINDS[CanaryKind.STRUCTURED]
    why = probe.unvalidatable(STRUCTURED, ServerFacts(reasoning_parser="qwen3"))
    assert why is not None
    assert "--reasoning-parser qwen3" in why
    assert "reasoning: keep" in why
    assert probe.unvalidatable(STRUCTURED, ServerFacts()) is None
    kept = replace(STRUCTURED, reasoning="keep")
    assert probe.unvalidatable(kept, ServerFacts(reasoning_parser="qwen3")) is None


def test_text_and_multimodal_are_validated_whatever_the_parser() -> None:
    facts = ServerFacts(reasoning_parser="qwen3")
    assert kinds.unvalidatable(CATALOG.specs, facts) == {
        CanaryKind.STRUCTURED: KINDS[CanaryKind.STRUCTURED].unvalidatable(STRUCTURED, facts)
    }


def test_one_kept_spec_keeps_its_kind_and_disabled_specs_do_not_count() -> None:
    facts = ServerFacts(reasoning_parser="qwen3")
    second = replace(STRUCTURED, name="structured-kept", reasoning="keep")
    assert kinds.unvalidatable([STRUCTURED, second], facts) == {}
    off = replace(second, enabled=False)
    assert CanaryKind.STRUCTURED in kinds.unvalidatable([STRUCTURED, off], facts)


def write_structured(directory: Path, **fields: Any) -> Path:
    shipped = yaml.safe_load(
        (Path(__file__).parents[3] / "sentinel/canary/specs/structured.yaml").read_text()
    )
    text = {
        "kind": "text",
        "request": {"messages": [{"role": "user", "content": "x"}], "max_tokens": 1},
    }
    (directory / "text.yaml").write_text(yaml.safe_dump(text))
    (directory / "structured.yaml").write_text(yaml.safe_dump({**shipped, **fields}))
    return directory


def test_the_catalog_reads_the_keep_option_and_refuses_anything_else(tmp_path: Path) -> None:
    assert STRUCTURED.reasoning == "auto"
    assert (
        load_catalog(write_structured(tmp_path, reasoning="keep")).get("structured").reasoning
        == "keep"
    )
    with pytest.raises(CatalogError) as caught:
        load_catalog(write_structured(tmp_path, reasoning="always"))
    assert caught.value.key == "reasoning"


# -- the run disables it (evaluator), the doctor names it ----------------------------


def api_server(cmdline: list[str]) -> ProcessSnapshot:
    api = ProcessInfo(
        pid=10,
        role=ProcessRole.API_SERVER,
        name="python",
        state=ProcessState.SLEEPING,
        create_time=1.0,
        cmdline=tuple(cmdline),
    )
    return ProcessSnapshot(at=time.monotonic(), api=api, reasoning_parser=reasoning_parser(cmdline))


def evaluator_for(specs: tuple[CanarySpec, ...]) -> Evaluator:
    now = time.monotonic()
    ledger = Ledger([(s.kind, Action(s.policy), s.latency_slo) for s in specs], now)
    metrics = SentinelMetrics(CollectorRegistry())

    def no_context(trigger: Any) -> Any:
        raise AssertionError("no diagnostics expected")

    return Evaluator(
        Settings(),
        ledger=ledger,
        state=HealthState(),
        metrics=metrics,
        incidents=IncidentRecorder(None, metrics, no_context),
        observations=Observations(),
        config={},
        specs=specs,
    )


REASONING_SERVER = ["vllm", "serve", "m", "--reasoning-parser", "qwen3"]


async def test_the_evaluator_disables_the_kind_and_says_so_once() -> None:
    evaluator = evaluator_for(CATALOG.enabled())
    ledger = evaluator.ledger
    with structlog.testing.capture_logs() as logs:
        await evaluator.evaluate(time.monotonic())  # no process seen yet: nothing known
        assert all(record.enabled for record in ledger.records.values())
        ledger.observe_processes(api_server(REASONING_SERVER), time.monotonic())
        await evaluator.evaluate(time.monotonic())
        await evaluator.evaluate(time.monotonic())
    record = ledger.records[CanaryKind.STRUCTURED]
    assert not record.enabled
    assert "--reasoning-parser qwen3" in record.disabled_reason
    assert ledger.records[CanaryKind.TEXT].enabled
    assert ledger.records[CanaryKind.MULTIMODAL].enabled
    disabled = [e for e in logs if e["event"] == "canary_kind_disabled"]
    assert [(e["kind"], e["why"]) for e in disabled] == [("structured", record.disabled_reason)]


async def test_a_kept_structured_canary_stays_enabled_behind_a_parser() -> None:
    specs = tuple(
        replace(s, reasoning="keep") if s.kind is CanaryKind.STRUCTURED else s
        for s in CATALOG.enabled()
    )
    evaluator = evaluator_for(specs)
    evaluator.ledger.observe_processes(api_server(REASONING_SERVER), time.monotonic())
    await evaluator.evaluate(time.monotonic())
    assert evaluator.ledger.records[CanaryKind.STRUCTURED].enabled


async def test_a_restart_without_the_parser_runs_the_kind_again() -> None:
    evaluator = evaluator_for(CATALOG.enabled())
    ledger = evaluator.ledger
    ledger.observe_processes(api_server(REASONING_SERVER), time.monotonic())
    await evaluator.evaluate(time.monotonic())
    assert not ledger.records[CanaryKind.STRUCTURED].enabled
    restarted = api_server(["vllm", "serve", "m"])
    restarted = replace(restarted, api=replace(restarted.api, pid=11) if restarted.api else None)
    ledger.observe_processes(restarted, time.monotonic())
    await evaluator.evaluate(time.monotonic())
    assert ledger.records[CanaryKind.STRUCTURED].enabled


def test_the_doctor_names_the_kind_that_will_disable_itself() -> None:
    checks = check_canary_kinds([REASONING_SERVER], CATALOG.enabled())
    assert [(c.area, c.severity) for c in checks] == [("canaries", Severity.WARN)]
    assert "structured" in checks[0].summary
    assert "--reasoning-parser qwen3" in checks[0].detail


def test_the_doctor_is_content_when_kept_or_without_a_parser() -> None:
    kept = [replace(s, reasoning="keep") for s in CATALOG.enabled()]
    for cmdline, specs in ((REASONING_SERVER, kept), (["vllm", "serve", "m"], CATALOG.enabled())):
        checks = check_canary_kinds([cmdline], specs)
        assert [c.severity for c in checks] == [Severity.OK]
    assert "qwen3" in check_canary_kinds([REASONING_SERVER], kept)[0].detail
    skipped = check_canary_kinds([], CATALOG.enabled())
    assert [c.severity for c in skipped] == [Severity.SKIPPED]
