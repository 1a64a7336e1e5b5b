"""A plain JSON reply to a streamed canary is an answer to judge, not a broken stream.

A server that does not stream (or a proxy that buffers) answers a request
with ``stream: true`` with one JSON body; before the first startup such a
server must not be failed for its transport, let alone hung on a path.
"""

from __future__ import annotations

import json
from dataclasses import replace

import httpx
import pytest

from sentinel.canary.catalog import load_catalog
from sentinel.canary.result import Reason
from sentinel.canary.runner import CanaryRunner

CATALOG = load_catalog(None)


def _reply(request: httpx.Request, *, content_type: str) -> httpx.Response:
    body = json.loads(request.content)
    content = "ok"
    response_format = body.get("response_format")
    if response_format is not None:
        schema = response_format["json_schema"]["schema"]
        content = json.dumps(schema["enum"][0]) if "enum" in schema else "{}"
    payload = {
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    }
    return httpx.Response(200, content=json.dumps(payload), headers={"content-type": content_type})


@pytest.mark.parametrize("kind", ["text", "structured"])
@pytest.mark.parametrize(
    ("content_type", "reason"),
    [
        ("application/json", Reason.OK),
        ("application/json; charset=utf-8", Reason.OK),
        ("text/plain", Reason.BAD_BODY),
    ],
)
async def test_a_streamed_canary_answered_with_one_json_body(
    kind: str, content_type: str, reason: Reason
) -> None:
    spec = replace(CATALOG.get(kind), stream=True)
    transport = httpx.MockTransport(lambda r: _reply(r, content_type=content_type))
    async with httpx.AsyncClient(transport=transport) as client:
        result = await CanaryRunner(client, "http://t.invalid").run(spec, model="m", deadline=5)
    assert result.reason is reason, result.detail
