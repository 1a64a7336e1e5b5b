"""The wire between the API process and the engine child: length-prefixed pickled tuples.

Both ends are our own processes on one machine, over a ``socketpair`` the API
process creates, so pickle is safe and fast. The API side writes through an
asyncio transport (never blocking its event loop, even while the engine is
stopped with SIGSTOP and its socket buffer is full); the engine side reads
with a non-blocking socket and :class:`FrameDecoder`.

Messages, API -> engine::

    ("add", [(rid, prompt_tokens, max_tokens, eos_at, priority, arrival, structured, remote), ...])
    ("abort", [rid, ...])
    ("fault", name, params, until)        # until: monotonic deadline or None
    ("clear", name_or_None)
    ("utility", call_id, name, arg)       # an engine query, answered between steps
    ("shutdown",)

Engine -> API::

    ("ready", pid)
    ("step", [(rid, generated_total, finish_reason_or_None), ...], EngineStats)
    ("aborted", [rid, ...])               # the aborts taken in (a hung engine takes none)
    ("utility", call_id, result)
"""

from __future__ import annotations

import contextlib
import ctypes
import pickle
import signal
import struct
import sys
from typing import Any

_HEADER = struct.Struct("!I")
HEADER_SIZE = _HEADER.size


def encode(message: tuple[Any, ...]) -> bytes:
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(payload)) + payload


def frame_length(header: bytes) -> int:
    (length,) = _HEADER.unpack(header)
    return int(length)


def decode(payload: bytes) -> tuple[Any, ...]:
    message = pickle.loads(payload)
    if not isinstance(message, tuple):
        raise ValueError("IPC frame is not a tuple")
    return message


class FrameDecoder:
    """Reassembles frames from arbitrary chunks of a byte stream."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[Any, ...]]:
        self._buffer += data
        messages: list[tuple[Any, ...]] = []
        offset = 0
        while len(self._buffer) - offset >= HEADER_SIZE:
            length = frame_length(bytes(self._buffer[offset : offset + HEADER_SIZE]))
            end = offset + HEADER_SIZE + length
            if len(self._buffer) < end:
                break
            messages.append(decode(bytes(self._buffer[offset + HEADER_SIZE : end])))
            offset = end
        del self._buffer[:offset]
        return messages


_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Ask Linux to SIGKILL us when our parent dies, even while we are stopped.

    The engine asks it of the API process, a worker of its engine; so no
    child of the simulator outlives the process that started it.
    """
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
