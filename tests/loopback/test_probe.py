"""``sentinel probe``: fan-out, skip semantics, rendering, exit codes and usage errors."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from chaos.ports import free_port
from sentinel.canary.kinds import KINDS
from sentinel.canary.result import Reason
from sentinel.canary.spec import CanaryKind
from sentinel.commands.probe import (
    add_probe_arguments,
    exit_code,
    normalize_url,
    probe_main,
    probe_targets,
    render_json,
    render_table,
)


def fake_server(*, images: bool = True, hang_structured: bool = False) -> httpx.MockTransport:
    """A minimal OpenAI-compatible server at the transport seam."""

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.host == "down.test":
            raise httpx.ConnectError("refused", request=request)
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"object": "list", "data": [{"id": "tiny"}]})
        body = json.loads(request.content)
        if request.url.path == "/v1/completions":
            return _completions(body)
        content = body["messages"][-1]["content"]
        if isinstance(content, list) and not images:
            error = {"message": "tiny is not a multimodal model", "type": "BadRequestError"}
            return httpx.Response(400, json={"error": {**error, "param": None, "code": 400}})
        text = "ok"
        if "response_format" in body:
            if hang_structured:
                return httpx.Response(500, json={"error": {"message": "grammar failed"}})
            text = json.dumps(body["response_format"]["json_schema"]["schema"]["enum"][0])
        prompt_tokens = 26 if isinstance(content, list) else 10
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": 1}
        if body.get("stream"):
            # Streamed as vLLM does: one delta per token, usage last (include_usage).
            chunks = [
                {"choices": [{"delta": {"content": text}, "finish_reason": None}]},
                {"choices": [{"delta": {}, "finish_reason": "stop"}]},
                {"choices": [], "usage": usage},
            ]
            events = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
            return httpx.Response(
                200, content=events.encode(), headers={"content-type": "text/event-stream"}
            )
        reply = {
            "choices": [{"message": {"content": text}, "finish_reason": "stop"}],
            "usage": usage,
        }
        return httpx.Response(200, json=reply)

    return httpx.MockTransport(answer)


def _completions(body: dict[str, Any]) -> httpx.Response:
    """The correctness check's greedy prompts: token ids and log-probabilities, as vLLM."""
    prompts = body["prompt"] if isinstance(body["prompt"], list) else [body["prompt"]]
    n = int(body.get("max_tokens") or 1)
    choices = []
    for index, _ in enumerate(prompts):
        tokens = [f"token_id:{100 + index * 10 + i}" for i in range(n)]
        logprobs = {
            "text_offset": list(range(n)),
            "token_logprobs": [-0.1] * n,
            "tokens": tokens,
            "top_logprobs": [{t: -0.1, f"token_id:{7 + i}": -2.0} for i, t in enumerate(tokens)],
        }
        choices.append(
            {"index": index, "text": "x" * n, "logprobs": logprobs, "finish_reason": "length"}
        )
    usage = {"prompt_tokens": 5 * len(prompts), "completion_tokens": n * len(prompts)}
    return httpx.Response(200, json={"choices": choices, "usage": usage})


async def probe(transport: httpx.MockTransport, urls: list[str], **kw: Any) -> Any:
    async with httpx.AsyncClient(transport=transport) as client:
        return await probe_targets(urls, client=client, **kw)


async def test_healthy_targets_report_every_kind_ok() -> None:
    reports = await probe(fake_server(), ["http://a.test", "http://b.test/v1/"])
    assert [r.url for r in reports] == ["http://a.test", "http://b.test"]
    for report in reports:
        assert report.model == "tiny"
        assert report.healthy
        assert sorted(r.kind for r in report.results) == sorted(KINDS)
        assert all(r.reason is Reason.OK for r in report.results)
    assert exit_code(reports) == 0


async def test_text_only_model_skips_multimodal_and_stays_healthy() -> None:
    (report,) = await probe(fake_server(images=False), ["http://a.test"])
    reasons = {r.kind: r.reason for r in report.results}
    assert reasons[CanaryKind.MULTIMODAL] is Reason.UNSUPPORTED
    assert report.healthy
    assert "skipped" in render_table([report])
    assert json.loads(render_json([report]))["targets"][0]["results"][2]["outcome"] == "skipped"


async def test_one_failing_kind_makes_the_target_unhealthy() -> None:
    reports = await probe(
        fake_server(hang_structured=True),
        ["http://a.test"],
        kinds=[CanaryKind.TEXT, CanaryKind.STRUCTURED],
    )
    (report,) = reports
    assert {r.kind: r.reason for r in report.results} == {
        CanaryKind.TEXT: Reason.OK,
        CanaryKind.STRUCTURED: Reason.HTTP_STATUS,
    }
    assert not report.healthy
    assert exit_code(reports) == 1
    document = json.loads(render_json(reports))
    assert document["healthy"] is False
    assert document["targets"][0]["results"][1]["detail"] == "HTTP 500: grammar failed"


async def test_unreachable_target_is_one_failed_row() -> None:
    reports = await probe(fake_server(), ["http://down.test", "http://a.test"], concurrency=1)
    down, up = reports
    assert down.error_reason is Reason.CONNECT
    assert down.results == ()
    assert up.healthy
    table = render_table(reports)
    assert "http://down.test" in table
    assert "connect" in table
    assert exit_code(reports) == 1


def test_table_does_not_read_details_as_markup() -> None:
    from sentinel.canary.result import CanaryResult
    from sentinel.commands.probe import TargetReport

    result = CanaryResult("text", CanaryKind.TEXT, Reason.BAD_BODY, 0.0, 0.1, detail="[DONE] [b]x")
    table = render_table([TargetReport("http://a.test", "tiny", (result,))])
    assert "[DONE] [b]x" in table


@pytest.mark.parametrize(
    ("url", "normal"),
    [
        ("http://h:8000", "http://h:8000"),
        ("http://h:8000/", "http://h:8000"),
        ("https://h/v1", "https://h"),
        ("http://h/prefix/v1/", "http://h/prefix"),
    ],
)
def test_normalize_url(url: str, normal: str) -> None:
    assert normalize_url(url) == normal


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="sentinel probe")
    add_probe_arguments(parser)
    return parser.parse_args(argv)


def test_arguments_parse() -> None:
    args = parse(
        "http://a", "http://b", "--kind", "text", "--kind", "structured", "--output", "json"
    )
    assert args.urls == ["http://a", "http://b"]
    assert args.kinds == ["text", "structured"]
    assert args.output == "json"
    assert (args.timeout, args.concurrency, args.catalog, args.api_key_file) == (
        None,
        4,
        None,
        None,
    )


def test_unknown_kind_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as caught:
        parse("http://a", "--kind", "audio")
    assert caught.value.code == 2


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["ftp://a"], "must be an http:// or https:// URL"),
        (["http://[::1"], "not a URL (Invalid IPv6 URL)"),
        (["http://a", "--concurrency", "0"], "--concurrency"),
        (["http://a", "--api-key-file", "/nonexistent/key"], "cannot read /nonexistent/key"),
    ],
)
def test_usage_errors_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert probe_main(parse(*argv)) == 2
    assert message in capsys.readouterr().err


def test_api_key_file_of_two_lines_exits_2_without_showing_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = tmp_path / "key"
    key.write_text("sk-line-one\nsk-line-two\n", encoding="utf-8")
    assert probe_main(parse("http://a", "--api-key-file", str(key))) == 2
    captured = capsys.readouterr()
    assert f"{key} holds more than one line" in captured.err
    assert "sk-line" not in captured.err + captured.out


def test_bad_probes_dir_exits_2_naming_file_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "x.yaml").write_text("kind: foo\nrequest: {}\n")
    assert probe_main(parse("http://a", "--catalog", str(tmp_path))) == 2
    assert f"{tmp_path}/x.yaml: kind: unknown canary kind 'foo'" in capsys.readouterr().err


def test_kind_missing_from_catalog_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "t.yaml").write_text(
        "kind: text\nrequest: {messages: [{role: user, content: hi}], max_tokens: 1}\n"
    )
    assert probe_main(parse("http://a", "--catalog", str(tmp_path), "--kind", "structured")) == 2
    assert "no enabled canary of kind structured" in capsys.readouterr().err


def test_unreachable_target_exits_1_with_json(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SENTINEL_API_KEY_FILE", raising=False)
    monkeypatch.setenv("SENTINEL_API_KEY", "sk-env-key")
    port = free_port()
    assert probe_main(parse(f"http://127.0.0.1:{port}", "--output", "json", "--timeout", "2")) == 1
    out = capsys.readouterr().out
    document = json.loads(out)
    assert document["targets"][0]["error_reason"] == "connect"
    assert "sk-env-key" not in out
