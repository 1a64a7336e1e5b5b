"""Where each fault acts inside vLLM (0.32, with the older places of each hook), patched
at class level in every process.

- EngineCore busy loop, ``EngineCoreProc._process_engine_step`` (one schedule +
  execute + output round; the loop looks it up on every pass, so patching the
  class works whenever the plugin loads): ``engine_hang`` blocks before the
  step, ``stream_stall`` blocks once a running request has ``after`` output
  tokens (those tokens were already sent), ``slow_decode`` sleeps after the
  step so it takes ``factor`` times as long, or, given ``step_seconds``, sleeps
  that long after every step (one token per running request per step, so
  ``step_seconds: 2`` decodes at 0.5 token/s whatever the step itself costs).
  ``corrupt_weights`` corrupts the workers' weights in place before the next
  step and restores them once cleared (:mod:`.weights`: ``mode`` zero, layers
  or nan).
  Each of these takes ``engine`` (a data-parallel rank): only that engine's
  core acts on it, so one engine of several can hang while the others serve.
- Grammar compilation, ``StructuredOutputManager._create_grammar`` (run on
  EngineCore's grammar thread pool for every backend, xgrammar included):
  ``structured_hang`` blocks it, so structured requests wait while others run.
- Image preprocessing, ``InputProcessingContext.call_hf_processor`` (the HF
  processor call on the API server's single-thread multimodal executor, on a
  multimodal cache miss): ``multimodal_hang`` blocks it when media is present,
  so image requests queue while text requests run.

Faults are silent: the hooks log nothing and never raise into vLLM. A vLLM
whose internals moved leaves the hook uninstalled, which the engine tests
notice (the fault then has no effect).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from . import api_wedge, weights
from .faults import FAULT_DIR_ENV, PAUSE, FaultBoard

#: Floor for the step time ``slow_decode`` multiplies: a tiny model's steps take
#: about a millisecond, which no factor would make visible.
MIN_STEP_SECONDS = 0.01
_MARK = "__sentinel_chaos__"
_MEDIA_KEYS = frozenset({"images", "videos", "audios", "audio"})

Hook = Callable[[FaultBoard, Callable[..., Any]], Callable[..., Any]]


def _engine_step(board: FaultBoard, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def step(self: Any, *args: Any, **kwargs: Any) -> Any:
        rank = _dp_rank(self)
        _sync_weights(self, board, rank)
        while _mine(board.get("engine_hang"), rank):
            time.sleep(PAUSE)
        stall = board.get("stream_stall")
        while (
            stall is not None
            and _mine(stall, rank)
            and _has_streamed(self, int(stall.get("after", 1)))
        ):
            time.sleep(PAUSE)
            stall = board.get("stream_stall")
        started = time.monotonic()
        result = original(self, *args, **kwargs)
        slow = board.get("slow_decode")
        if slow is not None and _mine(slow, rank):
            time.sleep(_slow_decode_sleep(slow, time.monotonic() - started))
        return result

    return step


def _sync_weights(engine: Any, board: FaultBoard, rank: int) -> None:
    """``corrupt_weights``: corrupt (or restore) the workers' weights in place, between steps.

    Done once per change of the fault, through the executor's ``collective_rpc``
    (every worker, whatever the executor); any failure leaves the weights alone.
    """
    wanted = board.get("corrupt_weights")
    if wanted is not None and not _mine(wanted, rank):
        wanted = None
    key = None if wanted is None else json.dumps(dict(wanted), sort_keys=True)
    if getattr(engine, "_sentinel_weights", None) == key:
        return
    executor = getattr(engine, "model_executor", None)
    if executor is None:
        return
    note = board.directory / ".corrupt_weights.status"
    try:
        restored = executor.collective_rpc(weights.restore)
        changed = []
        if wanted is not None:
            changed = executor.collective_rpc(weights.corrupt, args=(dict(wanted),))
        # Cached prefixes were computed with the other weights (NaNs stay in the KV
        # cache); weights lost on wake-up come with an emptied cache as well.
        reset = getattr(engine, "reset_prefix_cache", None)
        cleared = reset() if callable(reset) else None
        _note(note, {"fault": key, "changed": changed, "restored": restored, "cache": cleared})
    except Exception as exc:  # silent toward vLLM: a fault never raises into it
        _note(note, {"fault": key, "error": f"{type(exc).__name__}: {exc}"})
        return
    engine._sentinel_weights = key


def _note(path: Path, status: Mapping[str, Any]) -> None:
    """What the weight fault did, for the tests that switch it (a dot-file the board skips)."""
    with contextlib.suppress(OSError):
        path.write_text(json.dumps(status, default=str))


def _slow_decode_sleep(params: Mapping[str, Any], elapsed: float) -> float:
    """Seconds to add after a step that took ``elapsed``: a fixed ``step_seconds`` when
    given (a decode rate independent of the model and the machine), else enough to make
    the step ``factor`` times as long."""
    fixed = params.get("step_seconds")
    if fixed is not None:
        return max(float(fixed), 0.0)
    return max(float(params.get("factor", 10.0)) - 1.0, 0.0) * max(elapsed, MIN_STEP_SECONDS)


def _dp_rank(engine: Any) -> int:
    """This engine core's data-parallel rank (0 without data parallelism).

    ``engine_index`` is the rank, and the value of the metrics' ``engine`` label:
    for a dense model each data-parallel engine is an independent ``EngineCoreProc``
    whose ``parallel_config.data_parallel_rank`` is reset to 0 (only
    ``data_parallel_index`` keeps the rank); an MoE model's ``DPEngineCoreProc``
    also keeps ``dp_rank``.
    """
    config = getattr(getattr(engine, "vllm_config", None), "parallel_config", None)
    for rank in (
        getattr(engine, "engine_index", None),
        getattr(engine, "dp_rank", None),
        getattr(config, "data_parallel_index", None),
        getattr(config, "data_parallel_rank", None),
    ):
        if isinstance(rank, int) and not isinstance(rank, bool):
            return rank
    return 0


def _mine(params: Mapping[str, Any] | None, rank: int) -> bool:
    """Whether a fault that is on applies to the engine of data-parallel ``rank``: every
    engine unless the fault names one with ``engine``."""
    if params is None:
        return False
    wanted = params.get("engine")
    return wanted is None or int(wanted) == rank


def _has_streamed(engine: Any, after: int) -> bool:
    """Whether any running request already has ``after`` output tokens."""
    scheduler = getattr(engine, "scheduler", None)
    for request in list(getattr(scheduler, "running", ()) or ()):
        if int(getattr(request, "num_output_tokens", 0)) >= after:
            return True
    return False


def _grammar(board: FaultBoard, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def create_grammar(self: Any, *args: Any, **kwargs: Any) -> Any:
        board.wait_while("structured_hang")
        return original(self, *args, **kwargs)

    return create_grammar


def _starve(board: FaultBoard, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def schedule(self: Any, *args: Any, **kwargs: Any) -> Any:
        fault = board.get("starve")
        if fault is None:
            return original(self, *args, **kwargs)
        below = int(fault.get("below", 0))
        # Out of the queue while the scheduler looks, back before the stats are made:
        # the waiting gauge shows them, the scheduler never admits them.
        held = [r for r in self.waiting if getattr(r, "priority", 0) >= below]
        if held:
            self.waiting.remove_requests(held)
        try:
            return original(self, *args, **kwargs)
        finally:
            for request in held:
                self.waiting.add_request(request)

    return schedule


def _media(board: FaultBoard, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def call_hf_processor(self: Any, hf_processor: Any, data: Any, *args: Any, **kw: Any) -> Any:
        if isinstance(data, Mapping) and _MEDIA_KEYS.intersection(data):
            board.wait_while("multimodal_hang")
        return original(self, hf_processor, data, *args, **kw)

    return call_hf_processor


#: Per hook, its places (module, class, method), newest release first; the first
#: that exists in this vLLM is patched. The grammar thread-pool task was
#: ``_async_create_grammar`` until about 0.11; ``InputProcessingContext`` lived
#: in ``vllm.inputs.registry`` before it moved beside the multimodal processors.
HOOKS: tuple[tuple[Hook, tuple[tuple[str, str, str], ...]], ...] = (
    (_engine_step, (("vllm.v1.engine.core", "EngineCoreProc", "_process_engine_step"),)),
    (_starve, (("vllm.v1.core.sched.scheduler", "Scheduler", "schedule"),)),
    (
        _grammar,
        (
            ("vllm.v1.structured_output", "StructuredOutputManager", "_create_grammar"),
            ("vllm.v1.structured_output", "StructuredOutputManager", "_async_create_grammar"),
        ),
    ),
    (
        _media,
        (
            ("vllm.multimodal.processing.context", "InputProcessingContext", "call_hf_processor"),
            ("vllm.multimodal.processing", "InputProcessingContext", "call_hf_processor"),
            ("vllm.inputs.registry", "InputProcessingContext", "call_hf_processor"),
        ),
    ),
)


def _find(places: tuple[tuple[str, str, str], ...]) -> tuple[Any, str, Any] | None:
    """The first place that exists here: (owner class, method name, original function)."""
    for module_name, class_name, method in places:
        try:
            owner = getattr(importlib.import_module(module_name), class_name)
            return owner, method, owner.__dict__[method]
        except (ImportError, AttributeError, KeyError):
            continue
    return None


def install(directory: str | None = None) -> list[str]:
    """Patch every hook point once in this process; return the ones patched."""
    directory = directory if directory is not None else os.environ.get(FAULT_DIR_ENV)
    if not directory:
        return []
    board = FaultBoard(Path(directory))
    patched: list[str] = []
    for hook, places in HOOKS:
        found = _find(places)
        if found is None:
            continue
        owner, method, original = found
        where = f"{owner.__module__}.{owner.__qualname__}.{method}"
        if not getattr(original, _MARK, False):
            wrapped = hook(board, original)
            setattr(wrapped, _MARK, True)
            setattr(owner, method, wrapped)
        patched.append(where)
    if api_wedge.install(board):
        patched.append("api_wedge (this API-server process's event loop)")
    return patched
