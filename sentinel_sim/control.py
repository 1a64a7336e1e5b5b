"""Clients for the simulator's control port (see :mod:`sentinel_sim.control_api`).

Fault names are the strings of :class:`sentinel_sim.faults.Fault`:
``engine_hang``, ``structured_hang``, ``multimodal_hang``, ``stream_stall``
(param ``after``), ``slow_decode`` (param ``factor``), ``error_5xx`` (params
``rate`` 0..1, default 1, and ``status``), ``garbage`` (param ``mode``:
``invalid_json`` | ``schema_break``), ``blackhole``, ``exit`` (params
``delay``, ``code``), the hang shapes (``stuck_running``, ``waiting_churn``,
``preemption_churn``, ``prefill_no_decode``, ``stall_after_first``,
``decode_dead``), the
broken shapes (``reset_all``, ``empty_200``, ``listener_closed``,
``metrics_lapse``, ``metrics_401``) and the legitimate stalls
(``long_prefill``, ``sleep``, ``pause``, ``weight_update``, ``compile_step``,
``slow_image``; their parameters are in :mod:`sentinel_sim.faults`). Every
fault takes an optional ``duration`` in seconds; faults acting inside the
engine take ``engine`` (a data-parallel index) to hit one engine only.

Example::

    with SimControl(sim.control_url) as control:
        control.set_fault("slow_decode", duration=5, factor=20)
        control.stop_engine()   # real SIGSTOP of VLLM::EngineCore
        control.resume_engine()
        control.clear_all()
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, Self

import httpx

from sentinel_sim.faults import Fault


class ControlError(RuntimeError):
    """The control port refused a request (bad fault name or parameter, engine gone)."""


def _payload(duration: float | None, params: dict[str, Any]) -> dict[str, Any]:
    return {"params": params, "duration": duration}


def _check(response: httpx.Response) -> Any:
    if response.status_code >= 400:
        raise ControlError(f"{response.status_code}: {response.text}")
    return response.json()


class SimControl:
    """Synchronous control client (tests, scripts, the demo)."""

    def __init__(self, control_url: str, *, timeout: float = 5.0) -> None:
        self._client = httpx.Client(base_url=control_url, timeout=timeout)

    def set_fault(
        self, name: str | Fault, *, duration: float | None = None, **params: Any
    ) -> dict[str, Any]:
        fault = Fault(name)
        result: dict[str, Any] = _check(
            self._client.put(f"/faults/{fault.value}", json=_payload(duration, params))
        )
        return result

    def clear_fault(self, name: str | Fault) -> None:
        _check(self._client.delete(f"/faults/{Fault(name).value}"))

    def clear_all(self) -> None:
        _check(self._client.delete("/faults"))

    def faults(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = _check(self._client.get("/faults"))["faults"]
        return result

    def signal_engine(
        self, signal: str, *, engine: int = 0, worker: int | None = None
    ) -> dict[str, Any]:
        """A real signal to a data-parallel ``engine`` (or its tensor-parallel ``worker``)."""
        body = {"signal": signal, "engine": engine, "worker": worker}
        result: dict[str, Any] = _check(self._client.post("/engine/signal", json=body))
        return result

    def stop_engine(self) -> None:
        self.signal_engine("stop")

    def resume_engine(self) -> None:
        self.signal_engine("cont")

    def kill_engine(self) -> None:
        self.signal_engine("kill")

    def state(self) -> dict[str, Any]:
        result: dict[str, Any] = _check(self._client.get("/state"))
        return result

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncSimControl:
    """The same operations for asyncio code (scenarios, the sentinel demo)."""

    def __init__(self, control_url: str, *, timeout: float = 5.0) -> None:
        self._client = httpx.AsyncClient(base_url=control_url, timeout=timeout)

    async def set_fault(
        self, name: str | Fault, *, duration: float | None = None, **params: Any
    ) -> dict[str, Any]:
        fault = Fault(name)
        response = await self._client.put(f"/faults/{fault.value}", json=_payload(duration, params))
        result: dict[str, Any] = _check(response)
        return result

    async def clear_fault(self, name: str | Fault) -> None:
        _check(await self._client.delete(f"/faults/{Fault(name).value}"))

    async def clear_all(self) -> None:
        _check(await self._client.delete("/faults"))

    async def faults(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = _check(await self._client.get("/faults"))["faults"]
        return result

    async def signal_engine(
        self, signal: str, *, engine: int = 0, worker: int | None = None
    ) -> dict[str, Any]:
        body = {"signal": signal, "engine": engine, "worker": worker}
        response = await self._client.post("/engine/signal", json=body)
        result: dict[str, Any] = _check(response)
        return result

    async def stop_engine(self) -> None:
        await self.signal_engine("stop")

    async def resume_engine(self) -> None:
        await self.signal_engine("cont")

    async def kill_engine(self) -> None:
        await self.signal_engine("kill")

    async def state(self) -> dict[str, Any]:
        result: dict[str, Any] = _check(await self._client.get("/state"))
        return result

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
