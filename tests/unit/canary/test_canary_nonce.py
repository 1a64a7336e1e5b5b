"""Every canary body varies per run without changing the answer, from the runner's nonce."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from sentinel.canary.catalog import CatalogError, load_catalog
from sentinel.canary.kinds import KINDS
from sentinel.canary.protocol import NONCE_FIELD
from sentinel.canary.runner import CanaryRunner
from sentinel.canary.spec import CHAT_ENDPOINT, COMPLETIONS_ENDPOINT, CanarySpec

CATALOG = load_catalog()
COMPLETIONS_REQUEST = {"prompt": "Say ok.", "max_tokens": 2, "temperature": 0}
CHAT_REQUEST = {"messages": [{"role": "user", "content": "Say ok."}], "max_tokens": 2}


def specs() -> list[Any]:
    """Every shipped kind on every endpoint it can exercise."""
    out = []
    for spec in CATALOG.specs:
        for endpoint in sorted(KINDS[spec.kind].endpoints):
            changed = spec if endpoint == spec.endpoint else _on(spec, endpoint)
            out.append(pytest.param(changed, id=f"{spec.name}-{endpoint.rsplit('/', 1)[-1]}"))
    return out


def _on(spec: CanarySpec, endpoint: str) -> CanarySpec:
    request = COMPLETIONS_REQUEST if endpoint == COMPLETIONS_ENDPOINT else CHAT_REQUEST
    return replace(spec, endpoint=endpoint, request=request)


def without_nonce(body: Any, nonce: str) -> str:
    """The body with the nonce's every appearance masked (schema enum, ``user``)."""
    return json.dumps(body, sort_keys=True).replace(nonce, "NONCE")


@pytest.mark.parametrize("spec", specs())
def test_every_body_carries_the_nonce_and_differs_per_run_only_by_it(spec: CanarySpec) -> None:
    probe = KINDS[spec.kind]
    first = probe.build(spec, model="m", nonce="aaaa1111").body
    second = probe.build(spec, model="m", nonce="bbbb2222").body
    assert first[NONCE_FIELD] == "sentinel-aaaa1111"
    assert second[NONCE_FIELD] == "sentinel-bbbb2222"
    assert json.dumps(first, sort_keys=True) != json.dumps(second, sort_keys=True)
    if spec.image is None:  # the image nonce is in pixels, not in text
        assert without_nonce(first, "aaaa1111") == without_nonce(second, "bbbb2222")


@pytest.mark.parametrize("spec", specs())
def test_the_nonce_leaves_what_the_model_is_asked_alone(spec: CanarySpec) -> None:
    """``user`` is the only field added per run beside the kind's own nonce carriers."""
    body = KINDS[spec.kind].build(spec, model="m", nonce="aaaa1111").body
    prompt_fields = {"messages", "prompt", "max_tokens", "temperature"}
    for key in prompt_fields & set(spec.request):
        if key != "messages" or spec.image is None:
            assert body[key] == spec.request[key]


def test_the_multimodal_baseline_stays_the_same_so_the_runner_caches_it() -> None:
    spec = CATALOG.get("multimodal")
    probe = KINDS[spec.kind]
    first = probe.build(spec, model="m", nonce="aaaa1111").baseline_body
    second = probe.build(spec, model="m", nonce="bbbb2222").baseline_body
    assert first is not None
    assert NONCE_FIELD not in first
    assert first == second


def test_a_template_cannot_set_the_nonce_field(tmp_path: Path) -> None:
    request = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 1, "user": "me"}
    (tmp_path / "text.yaml").write_text(yaml.safe_dump({"kind": "text", "request": request}))
    with pytest.raises(CatalogError) as caught:
        load_catalog(tmp_path)
    assert caught.value.key == "request.user"
    assert "nonce" in caught.value.problem


async def sent_users(nonce: Any, runs: int) -> list[str]:
    seen: list[str] = []

    def server(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content)[NONCE_FIELD])
        message = {"role": "assistant", "content": "ok"}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        return httpx.Response(200, json={"choices": [choice], "usage": {"completion_tokens": 1}})

    spec = CATALOG.get("text")
    assert spec.endpoint == CHAT_ENDPOINT
    async with httpx.AsyncClient(transport=httpx.MockTransport(server)) as client:
        kwargs = {} if nonce is None else {"nonce": nonce}
        runner = CanaryRunner(client, "http://t.invalid", **kwargs)
        for _ in range(runs):
            assert (await runner.run(spec, model="m", deadline=5)).ok
    return seen


async def test_the_nonce_on_the_wire_is_the_runner_s_own() -> None:
    assert await sent_users(lambda: "feedf00d", 1) == ["sentinel-feedf00d"]
    users = await sent_users(None, 3)  # the runner's default source: a fresh one per run
    assert len(set(users)) == 3
    assert all(u.startswith("sentinel-") and len(u) == len("sentinel-") + 8 for u in users)
