"""The correctness canary against the simulator: a server that answers garbage is not healthy.

Sentinel in-process (shortened timings) against a dev-mode simulator:

- weights lost after a wake-up (every free-text reply one token repeated,
  schema-constrained replies still valid) turns readiness red within 60 s,
  naming the ``corrupt`` kind, while liveness stays green (policy unready);
  the fingerprint taken before the sleep is not taken again;
- a declared weight update (replies change, a new version at ``/weight_info``
  and a finished weight-transfer operation on ``/metrics``) never does: a new
  fingerprint is taken for the new weights;
- a sidecar restarted beside a server that lost its weights compares against
  the fingerprint it kept on disk, and turns red, instead of taking the
  garbage as its baseline.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from sentinel.canary.spec import CanaryKind
from sentinel_sim.launch import SimProcess
from tests.loopback.sidecar import FAST, Sidecar, eventually, running_sidecar

CANARIES = {**FAST["canaries"], "correctness": {"interval": 1.0, "deadline": 2.0, "jitter": 0.0}}
RED_BUDGET = 60.0


@pytest.fixture
def sim() -> Iterator[SimProcess]:
    with SimProcess(scheduling_policy="priority", decode_tps=200, dev_mode=True) as process:
        yield process


async def _fingerprint(sidecar: Sidecar) -> dict[str, Any]:
    document: dict[str, Any] = (await sidecar.json("/fingerprint"))["correctness"]
    return document


async def _ready_with_fingerprint(sidecar: Sidecar) -> dict[str, Any]:
    await eventually(sidecar.green, 30, "startup, readiness and liveness green")

    async def taken() -> bool:
        return (await _fingerprint(sidecar))["fingerprint"] is not None

    await eventually(taken, 30, "a fingerprint taken")
    return await _fingerprint(sidecar)


async def _readiness(sidecar: Sidecar) -> tuple[int, str]:
    response = await sidecar.client.get(sidecar.url + "/readyz")
    return response.status_code, str(response.json()["reason"])


async def _red_for_corruption(sidecar: Sidecar) -> bool:
    code, reason = await _readiness(sidecar)
    return code == 503 and "corrupt output" in reason


def _metric(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def test_weights_lost_after_wake_up_turn_readiness_red(
    sim: SimProcess, tmp_path: Path
) -> None:
    async with running_sidecar(
        sim.base_url, canaries=CANARIES, diagnostics_dir=tmp_path
    ) as sidecar:
        before = await _ready_with_fingerprint(sidecar)
        assert (tmp_path / "fingerprints.json").exists()

        sim.control.set_fault("sleep", level=2)

        async def asleep() -> bool:
            code, reason = await _readiness(sidecar)
            return code == 503 and "asleep" in reason

        await eventually(asleep, 20, "readiness red while asleep")
        # Wake-up without the weights reloaded: every free-text reply is "!!!!".
        sim.control.set_fault("weights_lost")
        sim.control.clear_fault("sleep")
        woke = time.monotonic()
        await eventually(
            partial(_red_for_corruption, sidecar), RED_BUDGET, "readiness red for corrupt output"
        )
        took = time.monotonic() - woke
        assert took < RED_BUDGET
        assert await sidecar.code("/livez") == 200  # policy unready: the kubelet keeps it
        after = await _fingerprint(sidecar)
        assert after["fingerprint"] == before["fingerprint"]  # never re-taken on wake-up
        assert any(
            "degenerate" in departure
            for check in after["checks"]
            for departure in check["departures"]
        )
        metrics = (await sidecar.client.get(sidecar.url + "/metrics")).text
        assert _metric(metrics, "sentinel_hang_detections_total", kind="corrupt") >= 1
        # The structured canary still passes: constrained decoding hides the garbage.
        records = sidecar.daemon.ledger.records
        structured = [r.finished for r in records[CanaryKind.STRUCTURED].results if r.ok]
        assert max(structured, default=0.0) > woke

        # Weights back: the checks match again and readiness comes back.
        sim.control.clear_fault("weights_lost")

        async def serving() -> bool:
            code, _ = await _readiness(sidecar)
            return code == 200

        await eventually(serving, 30, "readiness green once the weights are back")
        print(f"weights lost after wake-up: readiness red {took:.1f} s after the wake-up")


async def test_declared_weight_update_is_not_corruption(sim: SimProcess, tmp_path: Path) -> None:
    async with running_sidecar(
        sim.base_url,
        canaries=CANARIES,
        diagnostics_dir=tmp_path,
        lifecycle_interval=1.0,
    ) as sidecar:
        before = await _ready_with_fingerprint(sidecar)
        assert before["weights"] == "default"
        sim.control.set_fault("weights_updated", version="v2")

        async def retaken() -> bool:
            fingerprint = (await _fingerprint(sidecar))["fingerprint"]
            return fingerprint is not None and fingerprint["weights"] == "v2"

        deadline = time.monotonic() + 40
        red: list[str] = []
        while time.monotonic() < deadline:
            code, reason = await _readiness(sidecar)
            if code != 200:
                red.append(reason)
            if await retaken() and time.monotonic() > deadline - 15:
                break
            await asyncio.sleep(0.2)  # polling readiness for the whole window
        assert red == []
        assert await retaken()
        after = await _fingerprint(sidecar)
        assert after["fingerprint"]["generations"] != before["fingerprint"]["generations"]
        assert after["fingerprint"]["why"]
        stored = json.loads((tmp_path / "fingerprints.json").read_text())
        assert {p["weights"] for p in stored["fingerprints"]} == {"default", "v2"}


async def test_restarted_sidecar_keeps_the_fingerprint_taken_before(
    sim: SimProcess, tmp_path: Path
) -> None:
    async with running_sidecar(
        sim.base_url, canaries=CANARIES, diagnostics_dir=tmp_path
    ) as sidecar:
        before = await _ready_with_fingerprint(sidecar)
    # Meanwhile the server lost its weights; a new sidecar must not take that as its baseline.
    sim.control.set_fault("weights_lost")
    async with running_sidecar(
        sim.base_url, canaries=CANARIES, diagnostics_dir=tmp_path
    ) as sidecar:
        try:
            await eventually(
                partial(_red_for_corruption, sidecar), RED_BUDGET, "red for corrupt output"
            )
        except AssertionError as exc:
            seen = await _readiness(sidecar), await _fingerprint(sidecar)
            raise AssertionError(f"{exc}; readiness and fingerprint: {seen}") from None
        after = await _fingerprint(sidecar)
        assert after["fingerprint"] == before["fingerprint"]


async def test_operator_rebaseline_takes_the_maintenance_token(
    sim: SimProcess, tmp_path: Path
) -> None:
    from sentinel.cli import main

    token = tmp_path / "token"
    token.write_text("0123456789abcdef0123456789abcdef\n")
    async with running_sidecar(
        sim.base_url,
        canaries=CANARIES,
        diagnostics_dir=tmp_path / "bundles",
        maintenance_token_file=token,
    ) as sidecar:
        before = await _ready_with_fingerprint(sidecar)
        refused = await sidecar.client.post(sidecar.url + "/fingerprint", json={"reason": "x"})
        assert refused.status_code == 401
        assert (await _fingerprint(sidecar))["fingerprint"] == before["fingerprint"]
        argv = ["fingerprint", "rebaseline", "--sentinel", sidecar.url, "--token-file", str(token)]
        code = await asyncio.to_thread(main, [*argv, "--reason", "new checkpoint"])
        assert code == 0

        async def retaken() -> bool:
            fingerprint = (await _fingerprint(sidecar))["fingerprint"]
            return fingerprint is not None and "new checkpoint" in fingerprint["why"]

        await eventually(retaken, 20, "a fingerprint re-taken on the operator's word")
        assert (
            await asyncio.to_thread(main, ["fingerprint", "show", "--sentinel", sidecar.url]) == 0
        )
