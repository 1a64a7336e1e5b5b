"""Planted secrets, and the harmless values around them that must survive redaction.

Every secret is a distinct string that occurs nowhere else, so "0 of them
appear" is a plain substring check on whatever a sink emitted. They are
planted the ways real pods carry them: the environment, argv flags and
positional URLs, a JSON config, headers echoed in an error body, an exception
message, the target URL and the API key.
"""

from __future__ import annotations

import json

PEM_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7"
API_KEY = "sentinel-api-key-3392xq"
MULTILINE_KEY = ("first-line-k1x9", "second-line-k2z7")
TARGET_PASSWORD = "Tg-pass-5512"
TARGET_URL = f"http://sentinel:{TARGET_PASSWORD}@127.0.0.1:8000"

#: The fake vLLM's environment: secret by URL shape, by name, by token format, by entropy.
ENV: dict[str, str] = {
    "DATABASE_URL": "postgres://app:Pg-pass-4417@db:5432/app",
    "SENTRY_DSN": "https://5f2e9b1c7a4d4e8f@o1.ingest.sentry.io/42",
    "HTTPS_PROXY": "http://proxyuser:Px-pass-9931@proxy:3128",
    "OPENAI_API_BASE": "https://u:Oa-pass-2203@api.internal/v1",
    "SSH_PASSPHRASE": "staple-horse-8812",
    "GITHUB_PAT": "ghp_R8vK2mQ9xL4tN7wZ1cF5hJ3pB6sD0gY2aE8u",
    "AUTH": "Au-7781-secret-val",
    "JWT": (
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
        "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
    ),
    "MY_CREDS": "mc-5531-creds",
    "ANTHROPIC_AUTH": "sk-ant-api03-Qm7Zp2Xk9Lw4Rt6Yv1Nc",
    "HF_TOKEN": "hf_aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dF3h",
    "AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "AWS_SESSION_TOKEN": "FwoGZXIvYXdzEBQaDHn4r2Lw8Qv3kz9x5SKrAR",
    "SLACK_BOT": "xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOp",
    "OPAQUE_BLOB": "Zk9vYmFyQmF6UXV4MTIzNDU2Nzg5MGFiY2RlZg",
    "DB_PASS": "dbp-4471-xq",
    "REDIS_PWD": "rp-9921-qz",
    "TLS_PRIVATE_KEY": f"-----BEGIN PRIVATE KEY-----\n{PEM_BODY}\n-----END PRIVATE KEY-----",
    "SESSION_COOKIE": "sc-7719-cookieval",
    "OPENAI_API_KEY": "sk-proj-Vb8Nm2Qw4Er6Ty8Ui0Op",
    "SENTINEL_API_KEY": "\n".join(MULTILINE_KEY),
    "UPSTREAM": "s3://AKIAJ7Q2EXAMPLEKEY00:S3env-pass-7720@bucket/models",
}

#: The fake vLLM's command line: secret flags (both forms) and URLs with userinfo.
SECRET_ARGV: list[str] = [
    "--passphrase",
    "Pp-3391-phrase",
    "--api-key=Ak-5528-cli",
    "--hf-token",
    "hf-cli-tok-8812",
    "--otlp-traces-endpoint",
    "http://otel:Ot-pass-6671@collector:4317",
    "s3://AKIAQ4W7EXAMPLEKEY11:S3-pass-7720@bucket/weights",
    "--db-password",
    "Dp-2290-flag",
    "--client-secret=Cs-8841-flag",
    "--gh-pat",
    "Gp-4410-flag",
    "--creds",
    "Cr-9917-flag",
    "--kv-transfer-config",
    json.dumps({"auth": "Kv-auth-6618", "kv_role": "kv_both"}),
]

#: Ordinary flags and values that must stay readable.
HARMLESS_ARGV: list[str] = [
    "--model",
    "/models/x",
    "--served-model-name",
    "tiny-llama",
    "--port",
    "8000",
    "--max-num-seqs",
    "4",
    "--max-num-batched-tokens",
    "2048",
    "--ssl-keyfile",
    "/etc/tls/server.key",
]
HARMLESS_ENV: dict[str, str] = {
    "MODEL_NAME": "meta-llama/Llama-3.1-8B-Instruct",
    "HOSTNAME": "vllm-7c9f8d6b5-x2kqz4",
    "CUDA_VISIBLE_DEVICES": "0",
    "KEY_PATH": "/etc/tls/server.key",
    "TOKENIZERS_PARALLELISM": "false",
    "VLLM_WORKER_MULTIPROC_METHOD": "spawn",
}
#: What a reader of the bundle must still find (substrings of titles, env dumps).
SURVIVORS: list[str] = [
    "--model /models/x",
    "--served-model-name tiny-llama",
    "--port 8000",
    "--max-num-seqs 4",
    "--max-num-batched-tokens 2048",
    "--ssl-keyfile /etc/tls/server.key",
    "meta-llama/Llama-3.1-8B-Instruct",
    "vllm-7c9f8d6b5-x2kqz4",
    "TOKENIZERS_PARALLELISM",
    "kv_both",
]

#: The effective config as sentinel would load it from its settings file.
CONFIG: dict[str, object] = {
    "target": TARGET_URL,
    "api_key": API_KEY,
    "max_tokens": 4,
    "canaries": {"text": {"headers": {"Authorization": "Bearer Cfg-bearer-3371"}}},
    "extra": {"passwd": "Cfg-passwd-8823", "auth": "Cfg-auth-1190"},
}

#: An upstream error body that echoes the request's headers back.
ERROR_BODY = json.dumps(
    {
        "error": "unauthorized",
        "request_headers": {
            "Authorization": "Bearer Hdr-bearer-5567",
            "Proxy-Authorization": "Basic SGRyLXByb3h5LTc3NDE=",
            "X-Api-Key": API_KEY,
            "Cookie": "session=Hdr-cookie-2283",
        },
    }
)
EXCEPTION_MESSAGE = (
    "connect to postgres://svc:Exc-pass-6623@db:5432 failed; retry with password=Exc-pw-3380"
)

SECRETS: list[str] = [
    "Pg-pass-4417",
    "5f2e9b1c7a4d4e8f",
    "Px-pass-9931",
    "Oa-pass-2203",
    "staple-horse-8812",
    ENV["GITHUB_PAT"],
    "Au-7781-secret-val",
    ENV["JWT"],
    "mc-5531-creds",
    ENV["ANTHROPIC_AUTH"],
    ENV["HF_TOKEN"],
    "AKIAIOSFODNN7EXAMPLE",
    "wJalrXUtnFEMI",
    "FwoGZXIvYXdzEBQaDHn4r2Lw8Qv3kz9x5SKrAR",
    "xoxb-1234567890",
    "Zk9vYmFyQmF6UXV4MTIzNDU2Nzg5MGFiY2RlZg",
    "dbp-4471-xq",
    "rp-9921-qz",
    PEM_BODY,
    "sc-7719-cookieval",
    ENV["OPENAI_API_KEY"],
    *MULTILINE_KEY,
    "AKIAJ7Q2EXAMPLEKEY00",
    "S3env-pass-7720",
    "Pp-3391-phrase",
    "Ak-5528-cli",
    "hf-cli-tok-8812",
    "Ot-pass-6671",
    "AKIAQ4W7EXAMPLEKEY11",
    "S3-pass-7720",
    "Dp-2290-flag",
    "Cs-8841-flag",
    "Gp-4410-flag",
    "Cr-9917-flag",
    "Kv-auth-6618",
    API_KEY,
    TARGET_PASSWORD,
    "Cfg-bearer-3371",
    "Cfg-passwd-8823",
    "Cfg-auth-1190",
    "Hdr-bearer-5567",
    "SGRyLXByb3h5LTc3NDE=",
    "Hdr-cookie-2283",
    "Exc-pass-6623",
    "Exc-pw-3380",
]


def leaked(text: str) -> list[str]:
    """The planted secrets found in ``text`` (the JSON of a sink, a log, a file)."""
    return [secret for secret in SECRETS if secret in text]
