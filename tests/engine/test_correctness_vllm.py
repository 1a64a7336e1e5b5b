"""The correctness canary against the real vLLM: weights corrupted in place are not healthy.

On the session's real vLLM (CPU build, tiny random PaliGemma), the chaos
plugin corrupts the workers' weights in place (``corrupt_weights``, see
``chaos/vllm_plugin/sentinel_chaos_vllm/weights.py``): the embedding table
zeroed (weights lost: token 0 over and over) or set to NaN (vLLM then refuses
to encode the log-probabilities: a 400). Every answer is still HTTP 200 or a
fast 400; only the correctness canary sees it. Readiness must turn red within
60 s naming the ``corrupt`` kind, liveness stays green (policy unready), the
bundle carries the fingerprint and the diverging replies, and a sidecar
started again beside the same server compares against the fingerprint taken
before it restarted. The random model's own fingerprint is repetitive (the
last prompt token again and again): that is no alarm by itself.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.engine.session import EngineServer
from tests.loopback.sidecar import Sidecar, eventually, running_sidecar

pytestmark = [pytest.mark.engine, pytest.mark.timeout(300)]

TIMINGS: dict[str, Any] = {
    "hang_window": 6.0,
    "no_evidence_window": 10.0,
    "dead_grace": 2.0,
    "canaries": {
        "text": {"interval": 2.0, "deadline": 4.0, "jitter": 0.0},
        "structured": {"interval": 3.0, "deadline": 5.0},
        "multimodal": {"interval": 3.0, "deadline": 5.0},
        "correctness": {"interval": 5.0, "deadline": 5.0, "jitter": 0.0},
    },
}
GREEN = 90.0
RED = 60.0  # from the corruption to readiness red for corrupt output
BUNDLE = 40.0


@contextlib.asynccontextmanager
async def _sidecar(engine: EngineServer, directory: Path) -> AsyncIterator[Sidecar]:
    async with running_sidecar(engine.base_url, diagnostics_dir=directory, **TIMINGS) as sidecar:
        await eventually(sidecar.green, GREEN, "startup, readiness and liveness all 200")
        yield sidecar


async def _fingerprint(sidecar: Sidecar) -> dict[str, Any] | None:
    found: dict[str, Any] | None = (await sidecar.json("/fingerprint"))["correctness"][
        "fingerprint"
    ]
    return found


async def _taken(sidecar: Sidecar) -> dict[str, Any]:
    async def taken() -> bool:
        return await _fingerprint(sidecar) is not None

    await eventually(taken, 60, "a fingerprint taken")
    found = await _fingerprint(sidecar)
    assert found is not None
    return found


async def _corrupt(sidecar: Sidecar, engine: EngineServer, mode: str) -> float:
    """Corrupt the weights; seconds until readiness is red for corrupt output."""
    engine.faults.set("corrupt_weights", mode=mode)

    async def red() -> bool:
        response = await sidecar.client.get(sidecar.url + "/readyz")
        return response.status_code == 503 and "corrupt output" in response.json()["reason"]

    seconds = await eventually(red, RED, f"readiness red after corrupt_weights {mode}", 0.25)
    status = await sidecar.json("/status")
    assert "corrupt" in [h["kind"] for h in status["verdict"]["hangs"]]
    assert await sidecar.code("/livez") == 200  # unready, not restarted
    reason = (await sidecar.json("/readyz"))["reason"]
    print(f"\ncorrupt_weights {mode}: readiness red after {seconds:.1f} s ({reason})")
    return seconds


async def _recovers(sidecar: Sidecar, engine: EngineServer) -> None:
    engine.faults.clear("corrupt_weights")

    async def ready() -> bool:
        return await sidecar.code("/readyz") == 200

    await eventually(ready, GREEN, "readiness back once the weights are restored")


def _bundles(directory: Path) -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in directory.glob("*/bundle.json")]


async def test_weights_corrupted_in_place_are_red_and_survive_a_sidecar_restart(
    engine: EngineServer, tmp_path: Path
) -> None:
    async with _sidecar(engine, tmp_path) as sidecar:
        before = await _taken(sidecar)
        ids = [g["token_ids"] for g in before["generations"]]
        assert all(ids), ids
        started = time.monotonic()
        seconds = await _corrupt(sidecar, engine, "zero")
        assert seconds < RED

        await _recovers(sidecar, engine)
        assert await _fingerprint(sidecar) == before  # never re-taken
        print(f"zero: red, bundled and recovered within {time.monotonic() - started:.1f} s")

    # A new sidecar beside the same server: the fingerprint from before its restart.
    async with _sidecar(engine, tmp_path) as sidecar:
        assert await _taken(sidecar) == before
        seconds = await _corrupt(sidecar, engine, "nan")
        assert seconds < RED
        await _recovers(sidecar, engine)

    # The bundle of a corrupt hang (one per incident, at most one every 30 s, so
    # it may be either sidecar's): the fingerprint and the replies that left it.
    bundles = _bundles(tmp_path)
    corrupt = [b for b in bundles if b["trigger"]["kind"] == "corrupt-hang"]
    assert corrupt, [b["trigger"] for b in bundles]
    section = corrupt[0]["correctness"]
    assert section["fingerprint"]["generations"] == before["generations"]
    assert any(check["departures"] for check in section["checks"])
