"""Redaction: secret values go, their names stay."""

from __future__ import annotations

from typing import Any

import pytest
import structlog

from sentinel.telemetry.redact import (
    REDACTED,
    SecretScrubber,
    is_secret_name,
    redact_argv,
    redact_env,
    redact_headers,
    redact_text,
    redact_value,
    structlog_processor,
)


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("--api-key", True),
        ("--hf-token", True),
        ("HF_TOKEN", True),
        ("OPENAI_API_KEY", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("DB_PASSWORD", True),
        ("GOOGLE_APPLICATION_CREDENTIALS", True),
        ("apiKey", True),
        ("Authorization", True),
        ("x-api-key", True),
        ("MYTOKEN", True),
        ("--max-num-batched-tokens", False),
        ("TOKENIZERS_PARALLELISM", False),
        ("max_tokens", False),
        ("--model", False),
        ("OMP_NUM_THREADS", False),
        ("--kv-cache-dtype", False),
    ],
)
def test_secret_names(name: str, secret: bool) -> None:
    assert is_secret_name(name) is secret


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["vllm", "serve", "m", "--api-key", "sk-secret", "--port", "8000"],
            ["vllm", "serve", "m", "--api-key", REDACTED, "--port", "8000"],
        ),
        (["vllm", "--api-key=sk-secret"], ["vllm", f"--api-key={REDACTED}"]),
        (
            ["x", "--hf-token", "hf_abc", "--max-num-batched-tokens", "2048"],
            ["x", "--hf-token", REDACTED, "--max-num-batched-tokens", "2048"],
        ),
        # A secret flag followed by another flag has no value to hide.
        (["x", "--api-key", "--port", "1"], ["x", "--api-key", "--port", "1"]),
        (["x", "--api-key"], ["x", "--api-key"]),
    ],
)
def test_argv(argv: list[str], expected: list[str]) -> None:
    assert redact_argv(argv) == expected


def test_env_keeps_names() -> None:
    env = {"HF_TOKEN": "hf_secret", "PATH": "/usr/bin", "OMP_NUM_THREADS": "12", "X_KEY": ""}
    assert redact_env(env) == {
        "HF_TOKEN": REDACTED,
        "PATH": "/usr/bin",
        "OMP_NUM_THREADS": "12",
        "X_KEY": REDACTED,
    }


def test_headers() -> None:
    headers = {"Authorization": "Bearer sk-1", "Content-Type": "application/json", "Cookie": "s=1"}
    assert redact_headers(headers) == {
        "Authorization": REDACTED,
        "Content-Type": "application/json",
        "Cookie": REDACTED,
    }


@pytest.mark.parametrize(
    ("text", "gone", "kept"),
    [
        ("python -m vllm serve --api-key sk-abcdef --port 8000", "sk-abcdef", "--api-key"),
        ("vllm --api-key=sk-abcdef", "sk-abcdef", "--api-key="),
        ("HF_TOKEN=hf_abcdef python x.py", "hf_abcdef", "HF_TOKEN="),
        ("Authorization: Bearer sk-abcdef", "sk-abcdef", "Authorization: Bearer"),
        ('{"api_key": "sk-abcdef", "model": "m"}', "sk-abcdef", '"model": "m"'),
        ("curl -H 'authorization: bearer tok12345678'", "tok12345678", "authorization"),
    ],
)
def test_text(text: str, gone: str, kept: str) -> None:
    out = redact_text(text)
    assert gone not in out
    assert kept in out
    assert REDACTED in out


def test_text_leaves_innocent_flags() -> None:
    text = "--max-num-batched-tokens 2048 --scheduling-policy priority"
    assert redact_text(text) == text


def test_nested_value() -> None:
    config: dict[str, Any] = {
        "target": "http://127.0.0.1:8000",
        "api_key": "sk-abcdef",
        "canaries": {"text": {"max_tokens": 4, "headers": {"Authorization": "Bearer x"}}},
        "cmdline": ["vllm", "--api-key", "sk-abcdef"],
        "note": "started with HF_TOKEN=hf_abcdef",
        "count": 3,
        "none_key": None,
    }
    out = redact_value(config)
    assert out["api_key"] == REDACTED
    assert out["canaries"]["text"]["max_tokens"] == 4
    assert out["canaries"]["text"]["headers"]["Authorization"] == REDACTED
    assert out["cmdline"] == ["vllm", "--api-key", REDACTED]
    assert "hf_abcdef" not in out["note"]
    assert out["count"] == 3
    assert out["none_key"] is None
    assert config["api_key"] == "sk-abcdef"  # the input is not modified


def test_scrubber_removes_known_values_anywhere() -> None:
    scrubber = SecretScrubber(["sk-verysecret", "1"])  # too-short values are ignored
    bundle = {
        "stacks": "    handler (app.py:12)  key='sk-verysecret'",
        "labels": ["a=sk-verysecret", "x1y"],
        "sk-verysecret": 1,
    }
    out = scrubber.scrub(bundle)
    assert "sk-verysecret" not in repr(out)
    assert out["labels"][1] == "x1y"
    assert len(scrubber) == 1


def test_structlog_processor() -> None:
    with structlog.testing.capture_logs(processors=[structlog_processor]) as logs:
        structlog.get_logger().info(
            "request", headers={"Authorization": "Bearer sk-abcdef"}, api_key="sk-abcdef", n=1
        )
    assert logs[0]["headers"] == {"Authorization": REDACTED}
    assert logs[0]["api_key"] == REDACTED
    assert logs[0]["n"] == 1
