"""Redaction: secret values go, their names stay."""

from __future__ import annotations

import json
from typing import Any

import pytest
import structlog

from sentinel.telemetry.redact import (
    REDACTED,
    SecretScrubber,
    is_secret_name,
    redact,
    redact_argv,
    redact_env,
    redact_headers,
    redact_text,
    redact_url,
    redact_value,
    secret_values_in_env,
    structlog_processor,
)
from tests import secret_corpus as corpus


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


# -- by shape, by word parts, and the planted corpus ----------------------------


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("SSH_PASSPHRASE", True),
        ("GITHUB_PAT", True),
        ("AUTH", True),
        ("ANTHROPIC_AUTH", True),
        ("JWT", True),
        ("MY_CREDS", True),
        ("DB_PASS", True),
        ("REDIS_PWD", True),
        ("SENTRY_DSN", True),
        ("X-Amz-Signature", True),
        ("--passphrase", True),
        ("clientSecret", True),
        ("PWD", False),
        ("KEY_PATH", False),
        ("--key-file", False),
        ("--ssl-keyfile", False),
        ("HF_TOKEN_PATH", False),
        ("AUTH_TYPE", False),
        ("pass_config", False),
        ("author", False),
        ("--tokenizer", False),
    ],
)
def test_secret_names_by_word_parts(name: str, secret: bool) -> None:
    assert is_secret_name(name) is secret


@pytest.mark.parametrize(
    ("text", "gone"),
    [
        ("proxy at http://user:pw-1234@proxy:3128/x", "pw-1234"),
        ("s3://AKIAJ7Q2EXAMPLEKEY00:S3-pass-7720@bucket/m", "S3-pass-7720"),
        ("key AKIAIOSFODNN7EXAMPLE in use", "AKIAIOSFODNN7EXAMPLE"),
        ("token ghp_R8vK2mQ9xL4tN7wZ1cF5hJ3pB6sD0gY2aE8u", "ghp_R8vK2mQ9x"),
        ("github_pat_11ABCDEFG0123456789_abcdefghijklmnop", "github_pat_11ABCDEFG"),
        ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jV", "eyJhbGciOiJI"),
        ("key sk-ant-api03-Qm7Zp2Xk9Lw4Rt6Yv1Nc", "Qm7Zp2Xk9Lw4"),
        ("slack xoxb-1234567890-0987654321-AbCdEfGh", "xoxb-1234567890"),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIEabc123\n-----END RSA PRIVATE KEY-----", "MIIEabc"),
        ("Proxy-Authorization: Basic dXNlcjpwYXNz", "dXNlcjpwYXNz"),
        ("failed: password: hunter22x", "hunter22x"),
        ("kwargs db_pass='dbp-4471-xq'", "dbp-4471-xq"),
        ("--passphrase Pp-3391-phrase --port 8000", "Pp-3391-phrase"),
    ],
)
def test_text_by_shape(text: str, gone: str) -> None:
    out = redact_text(text)
    assert gone not in out, out
    assert REDACTED in out


def test_url_keeps_host_and_path() -> None:
    url = "http://sentinel:Tg-pass-5512@vllm:8000/v1?api_key=q-9921&model=m"
    assert redact_url(url) == f"http://{REDACTED}@vllm:8000/v1?api_key={REDACTED}&model=m"
    assert redact_url("http://127.0.0.1:8000") == "http://127.0.0.1:8000"


def test_random_env_values_go_unless_the_name_is_known_harmless() -> None:
    blob = "Zk9vYmFyQmF6UXV4MTIzNDU2Nzg5MGFiY2RlZg"
    out = redact_env(
        {"OPAQUE": blob, "NVIDIA_DRIVER_CAPABILITIES": blob, "WORDS": "compute,utility"}
    )
    assert out == {
        "OPAQUE": REDACTED,
        "NVIDIA_DRIVER_CAPABILITIES": blob,
        "WORDS": "compute,utility",
    }


def test_scrubber_remembers_each_line_of_a_multi_line_secret() -> None:
    scrubber = SecretScrubber(
        secret_values_in_env({"SENTINEL_API_KEY": "line-one-k1\nline-two-k2"})
    )
    assert scrubber.scrub_text("got line-two-k2 back") == f"got {REDACTED} back"


def test_the_corpus_through_the_entry_point_leaks_nothing_and_keeps_the_ordinary() -> None:
    emitted = {
        "env": redact({"environ": corpus.ENV | corpus.HARMLESS_ENV}),
        "argv": redact(["vllm", "serve", *corpus.SECRET_ARGV, *corpus.HARMLESS_ARGV]),
        "config": redact(corpus.CONFIG),
        "error_body": redact(corpus.ERROR_BODY),
        "exception": redact(corpus.EXCEPTION_MESSAGE),
        "target": redact_url(corpus.TARGET_URL),
    }
    text = json.dumps(emitted)
    assert corpus.leaked(text) == []
    assert len(corpus.SECRETS) >= 40
    title = " ".join(emitted["argv"])
    assert [s for s in corpus.SURVIVORS if s not in text and s not in title] == []
    for name, value in corpus.HARMLESS_ENV.items():
        assert emitted["env"]["environ"][name] == value
