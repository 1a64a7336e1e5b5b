"""``sentinel doctor`` on a server that is not vLLM: kinds probed, not assumed; unknowns said.

A text-only, chat-only server (images refused in llama.cpp's words, no
``/v1/completions``, no ``/metrics``, a command line that is not vLLM's) is
no problem: the kinds it cannot do are named, its policy is "unknown", the
missing ``/metrics`` a note. A vLLM server answering everything is validated
kind by kind; a text canary that fails is a problem.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from chaos.ports import free_port
from sentinel.canary.result import CanaryResult, Reason
from sentinel.canary.spec import MULTIMODAL, TEXT
from sentinel.diagnostics.checkup import probe_kinds, run_doctor
from sentinel.diagnostics.doctor import Severity, check_scheduling_policy, shipped_canaries
from sentinel.diagnostics.doctor_kinds import check_canary_kinds, check_probed_kinds

LLAMA_CPP = (
    "image input is not supported - hint: if this is unexpected, you may need to provide the mmproj"
)


def llama_server(*, images: bool = False, text_fails: bool = False) -> httpx.MockTransport:
    """A text-only llama-server at the transport seam: chat only, no /metrics."""

    def answer(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/v1/models":
            return httpx.Response(200, json={"object": "list", "data": [{"id": "tiny"}]})
        if path != "/v1/chat/completions":
            return httpx.Response(404, text="File Not Found")
        body = json.loads(request.content)
        content = body["messages"][-1]["content"]
        if isinstance(content, list) and not images:
            error = {"code": 400, "message": LLAMA_CPP, "type": "invalid_request_error"}
            return httpx.Response(400, json={"error": error})
        if text_fails:
            return httpx.Response(500, json={"error": {"code": 500, "message": "decode failed"}})
        text = "ok"
        if "response_format" in body:
            text = json.dumps(body["response_format"]["json_schema"]["schema"]["enum"][0])
        usage = {"prompt_tokens": 26 if isinstance(content, list) else 10, "completion_tokens": 1}
        return _reply(text, usage, stream=body.get("stream") is True)

    return httpx.MockTransport(answer)


def _reply(text: str, usage: dict[str, int], *, stream: bool) -> httpx.Response:
    if not stream:
        choice = {"message": {"content": text}, "finish_reason": "stop"}
        return httpx.Response(200, json={"choices": [choice], "usage": usage})
    chunks: list[dict[str, Any]] = [
        {"choices": [{"delta": {"content": text}, "finish_reason": None}]},
        {"choices": [{"delta": {}, "finish_reason": "stop"}]},
        {"choices": [], "usage": usage},
    ]
    events = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    return httpx.Response(200, text=events, headers={"content-type": "text/event-stream"})


LLAMA_CMDLINE = ["llama-server", "-m", "tiny.gguf", "--port", "8080"]


async def test_a_text_only_server_that_is_not_vllm_is_no_problem() -> None:
    target = f"http://127.0.0.1:{free_port()}"
    report = await run_doctor(target, transport=llama_server())
    by_summary = {c.summary: c for c in report.checks}
    assert report.exit_code == 0, [c for c in report.checks if c.severity is Severity.PROBLEM]
    skipped = [s for s in by_summary if "the server cannot do it" in s]
    assert sorted(s.split(":")[0] for s in skipped) == ["correctness", "multimodal"]
    assert (
        "image input is not supported"
        in by_summary[next(s for s in skipped if "multi" in s)].detail
    )
    assert not any("every enabled canary kind" in s for s in by_summary)
    validated = next(c for c in report.checks if c.summary.startswith("validated on this server"))
    assert "text" in validated.summary
    assert "structured" in validated.summary
    metrics = next(c for c in report.checks if c.area == "metrics")
    assert metrics.severity is Severity.NOTE


async def test_a_failing_text_canary_is_a_problem() -> None:
    probed, why = await probe_kinds(
        "http://llama.test", shipped_canaries(), transport=llama_server(text_fails=True)
    )
    assert why is None
    assert probed is not None
    checks = check_probed_kinds(probed)
    text = next(c for c in checks if c.summary.startswith("text canary failed"))
    assert text.severity is Severity.PROBLEM


def test_a_vllm_command_line_still_names_what_disables_itself() -> None:
    ok = CanaryResult("text", TEXT, Reason.OK, 0.0, 0.1)
    refused = CanaryResult(
        "multimodal", MULTIMODAL, Reason.HTTP_STATUS, 0.0, 0.1, "HTTP 400: nope", None, 400
    )
    vllm = ["vllm", "serve", "m", "--reasoning-parser", "qwen3"]
    checks = check_canary_kinds([vllm], shipped_canaries(), (ok, refused))
    summaries = [c.summary for c in checks]
    assert "structured canaries will disable themselves" in summaries
    assert "validated on this server: text" in summaries
    assert any(
        s.startswith("multimodal: http_status; sentinel run sets it aside") for s in summaries
    )
    # The same flags on a command line that is not vLLM's say nothing.
    foreign = check_canary_kinds([[*LLAMA_CMDLINE, "--reasoning-parser", "qwen3"]], [], ())
    assert not any("disable themselves" in c.summary for c in foreign)


def test_the_policy_of_a_server_that_is_not_vllm_is_unknown() -> None:
    unknown = check_scheduling_policy([[*LLAMA_CMDLINE, "--scheduling-policy", "fcfs"]])
    assert (unknown.severity, unknown.summary) == (Severity.SKIPPED, "scheduling policy unknown")
    vllm = check_scheduling_policy([["vllm", "serve", "m", "--scheduling-policy", "fcfs"]])
    assert vllm.severity is Severity.WARN
    assert "fcfs" in vllm.summary
