"""GPU state through NVML: the only module that imports ``pynvml`` (nvidia-ml-py).

Owns one snapshot of every visible GPU: utilization, memory, temperature,
power, clocks and throttle reasons, ECC counters, retired pages and remapped
rows, XID events seen during a short listening window, and the processes using
each device. It returns sentinel's own dataclasses; NVML types and errors stop
here.

No GPU is a normal state, not an error: when NVML cannot be loaded or
initialised (no driver, CPU-only node) or sees no device, the section says
``visible: false`` with the reason. Each field is read on its own, so a field a
device does not support (``NotSupported`` on many SKUs) is recorded in that
device's ``errors`` and the rest still comes through.

XID: NVML reports XID events only to a listener registered before they
happen, so a one-shot snapshot catches those arriving during its window
(``xid_window_s``); earlier ones are in the kernel log on the node.

Run ``python -m sentinel.diagnostics.gpu`` to print the section as JSON.

The bindings are imported by the first snapshot, not at start: most pods
never capture a bundle, and the import belongs to the worker thread a capture
runs in anyway. That thread shares the interpreter lock with the event loop
for the few milliseconds of the import, as it does for the NVML reads.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any, TypeVar

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class GpuProcess:
    pid: int
    used_memory_bytes: int | None
    kind: str  # "compute" or "graphics"


@dataclass(frozen=True, slots=True)
class XidEvent:
    device_index: int | None
    xid: int
    event_type: int


@dataclass(slots=True)
class GpuDevice:
    index: int
    name: str | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    utilization_gpu_percent: int | None = None
    utilization_memory_percent: int | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    temperature_c: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    clock_sm_mhz: int | None = None
    clock_memory_mhz: int | None = None
    clock_sm_max_mhz: int | None = None
    clocks_event_reasons: int | None = None  # bitmask of throttle reasons
    performance_state: int | None = None
    ecc_volatile_uncorrected: int | None = None
    ecc_volatile_corrected: int | None = None
    ecc_aggregate_uncorrected: int | None = None
    retired_pages_single_bit: int | None = None
    retired_pages_double_bit: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows: dict[str, int | bool] | None = None
    processes: list[GpuProcess] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class GpuSection:
    visible: bool
    reason: str  # why no GPU is visible, or "ok"
    driver_version: str | None = None
    nvml_version: str | None = None
    cuda_driver_version: int | None = None
    devices: list[GpuDevice] = field(default_factory=list)
    xid_events: list[XidEvent] = field(default_factory=list)
    xid_window_s: float = 0.0
    errors: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def snapshot(*, xid_window_s: float = 0.2) -> GpuSection:
    """Read every visible GPU once. Blocking (NVML calls): run it in a worker thread."""
    try:
        import pynvml as _pynvml
    except ImportError:  # pragma: no cover - nvidia-ml-py is a dependency
        return GpuSection(False, "no GPU visible: nvidia-ml-py is not installed")
    pynvml: Any = _pynvml
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return GpuSection(False, f"no GPU visible: NVML unavailable ({_text(exc)})")
    except OSError as exc:
        return GpuSection(False, f"no GPU visible: NVML library not loadable ({exc})")
    try:
        return _read_all(pynvml, xid_window_s)
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def _read_all(nv: Any, xid_window_s: float) -> GpuSection:
    section = GpuSection(True, "ok", xid_window_s=xid_window_s)
    errors = section.errors
    section.driver_version = _str(_field(errors, "driver_version", nv.nvmlSystemGetDriverVersion))
    section.nvml_version = _str(_field(errors, "nvml_version", nv.nvmlSystemGetNVMLVersion))
    section.cuda_driver_version = _field(
        errors, "cuda_driver_version", nv.nvmlSystemGetCudaDriverVersion
    )
    count = _field(errors, "device_count", nv.nvmlDeviceGetCount) or 0
    if count == 0:
        section.visible = False
        section.reason = "no GPU visible: NVML reports no devices"
        return section
    handles: list[Any] = []
    for index in range(count):
        handle: Any = _field(
            errors, f"device_{index}", partial(nv.nvmlDeviceGetHandleByIndex, index)
        )
        if handle is None:
            continue
        handles.append(handle)
        section.devices.append(_read_device(nv, index, handle))
    section.xid_events = _listen_xid(nv, handles, xid_window_s, errors)
    return section


def _read_device(nv: Any, index: int, h: Any) -> GpuDevice:
    dev = GpuDevice(index=index)
    e = dev.errors
    dev.name = _str(_field(e, "name", lambda: nv.nvmlDeviceGetName(h)))
    dev.uuid = _str(_field(e, "uuid", lambda: nv.nvmlDeviceGetUUID(h)))
    pci = _field(e, "pci", lambda: nv.nvmlDeviceGetPciInfo(h))
    dev.pci_bus_id = None if pci is None else _str(pci.busId)
    util = _field(e, "utilization", lambda: nv.nvmlDeviceGetUtilizationRates(h))
    if util is not None:
        dev.utilization_gpu_percent = int(util.gpu)
        dev.utilization_memory_percent = int(util.memory)
    mem = _field(e, "memory", lambda: nv.nvmlDeviceGetMemoryInfo(h))
    if mem is not None:
        dev.memory_total_bytes = int(mem.total)
        dev.memory_used_bytes = int(mem.used)
    dev.temperature_c = _field(
        e, "temperature", lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)
    )
    power = _field(e, "power", lambda: nv.nvmlDeviceGetPowerUsage(h))
    dev.power_w = None if power is None else power / 1000.0
    limit = _field(e, "power_limit", lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h))
    dev.power_limit_w = None if limit is None else limit / 1000.0
    dev.clock_sm_mhz = _field(e, "clock_sm", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
    dev.clock_memory_mhz = _field(
        e, "clock_memory", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)
    )
    dev.clock_sm_max_mhz = _field(
        e, "clock_sm_max", lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM)
    )
    reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None
    )
    if reasons is not None:
        dev.clocks_event_reasons = _field(e, "clocks_event_reasons", lambda: reasons(h))
    dev.performance_state = _field(
        e, "performance_state", lambda: nv.nvmlDeviceGetPerformanceState(h)
    )
    uncorrected = nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    corrected = nv.NVML_MEMORY_ERROR_TYPE_CORRECTED
    dev.ecc_volatile_uncorrected = _field(
        e,
        "ecc_volatile_uncorrected",
        lambda: nv.nvmlDeviceGetTotalEccErrors(h, uncorrected, nv.NVML_VOLATILE_ECC),
    )
    dev.ecc_volatile_corrected = _field(
        e,
        "ecc_volatile_corrected",
        lambda: nv.nvmlDeviceGetTotalEccErrors(h, corrected, nv.NVML_VOLATILE_ECC),
    )
    dev.ecc_aggregate_uncorrected = _field(
        e,
        "ecc_aggregate_uncorrected",
        lambda: nv.nvmlDeviceGetTotalEccErrors(h, uncorrected, nv.NVML_AGGREGATE_ECC),
    )
    sbe = _field(
        e,
        "retired_pages_single_bit",
        lambda: nv.nvmlDeviceGetRetiredPages(
            h, nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
        ),
    )
    dev.retired_pages_single_bit = None if sbe is None else len(sbe)
    dbe = _field(
        e,
        "retired_pages_double_bit",
        lambda: nv.nvmlDeviceGetRetiredPages(h, nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR),
    )
    dev.retired_pages_double_bit = None if dbe is None else len(dbe)
    pending = _field(
        e, "retired_pages_pending", lambda: nv.nvmlDeviceGetRetiredPagesPendingStatus(h)
    )
    dev.retired_pages_pending = None if pending is None else bool(pending)
    rows = _field(e, "remapped_rows", lambda: nv.nvmlDeviceGetRemappedRows(h))
    if rows is not None:
        corr, unc, is_pending, failed = rows
        dev.remapped_rows = {
            "correctable": int(corr),
            "uncorrectable": int(unc),
            "pending": bool(is_pending),
            "failure_occurred": bool(failed),
        }
    for kind, read in (
        ("compute", nv.nvmlDeviceGetComputeRunningProcesses),
        ("graphics", nv.nvmlDeviceGetGraphicsRunningProcesses),
    ):
        procs: Any = _field(e, f"{kind}_processes", partial(read, h)) or []
        for p in procs:
            used = getattr(p, "usedGpuMemory", None)
            dev.processes.append(GpuProcess(int(p.pid), None if used is None else int(used), kind))
    return dev


def _listen_xid(
    nv: Any, handles: list[Any], window_s: float, errors: dict[str, str]
) -> list[XidEvent]:
    if window_s <= 0 or not handles:
        return []
    events: list[XidEvent] = []
    event_set = _field(errors, "xid_event_set", nv.nvmlEventSetCreate)
    if event_set is None:
        return events
    try:
        registered = 0
        for index, handle in enumerate(handles):
            try:
                nv.nvmlDeviceRegisterEvents(handle, nv.nvmlEventTypeXidCriticalError, event_set)
                registered += 1
            except Exception as exc:
                errors[f"xid_register_{index}"] = _text(exc)
        if registered == 0:
            return events
        wait_ms = max(int(window_s * 1000), 1)
        while True:
            try:
                data = nv.nvmlEventSetWait(event_set, wait_ms)
            except nv.NVMLError as exc:
                if "Timeout" not in type(exc).__name__ and "timeout" not in _text(exc).lower():
                    errors["xid_wait"] = _text(exc)
                break
            device = next((i for i, h in enumerate(handles) if _same(h, data.device)), None)
            events.append(XidEvent(device, int(data.eventData), int(data.eventType)))
            wait_ms = 1  # drain what is already queued, then stop
    finally:
        _field(errors, "xid_event_set_free", lambda: nv.nvmlEventSetFree(event_set))
    return events


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) or getattr(a, "value", a) == getattr(b, "value", b)
    except Exception:
        return False


def _field(errors: dict[str, str], name: str, read: Callable[[], _T]) -> _T | None:
    try:
        return read()
    except Exception as exc:  # NVML raises a class per error code; all are recorded alike
        errors[name] = _text(exc)
        return None


def _str(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def main() -> int:
    """Print the GPU section as JSON (a one-file check on a GPU machine)."""
    window = float(sys.argv[1]) if len(sys.argv) > 1 else 0.2
    print(json.dumps(snapshot(xid_window_s=window).to_json(), indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
