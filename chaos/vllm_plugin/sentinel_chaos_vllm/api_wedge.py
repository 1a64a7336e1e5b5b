"""``api_wedge``: one API-server process of ``--api-server-count N`` blocks its event loop.

vLLM titles each API-server process ``VLLM::APIServer_<i>`` before it builds its
engine client (when this plugin loads). In such a process a watcher thread
polls the fault board; when ``api_wedge`` is on with ``server`` equal to this
process's index it interrupts the main thread (the one running the event
loop) with SIGUSR2, whose handler sleeps there until the fault is cleared: the
loop is stuck in a synchronous call, reads nothing and answers nothing, while
the process stays alive and sleeping, as a wedged server does.
"""

from __future__ import annotations

import contextlib
import re
import signal
import threading
import time
from pathlib import Path

from .faults import PAUSE, FaultBoard

_TITLE = re.compile(rb"APIServer_(\d+)")
WATCH_INTERVAL = 0.2
_armed: list[bool] = []  # once per process: vLLM may load its plugins more than once


def server_index() -> int | None:
    """This process's API-server index, from its title (None: not an API-server process)."""
    try:
        title = Path("/proc/self/cmdline").read_bytes()
    except OSError:
        return None
    found = _TITLE.search(title)
    return int(found.group(1)) if found else None


def _wanted(board: FaultBoard, index: int) -> bool:
    fault = board.get("api_wedge")
    return fault is not None and int(fault.get("server", 1)) == index


def install(board: FaultBoard) -> bool:
    """Arm the wedge in an API-server process; False anywhere else (or off the main thread)."""
    index = server_index()
    if index is None or threading.current_thread() is not threading.main_thread():
        return False
    if _armed:
        return True

    def wedge(signum: int, frame: object) -> None:
        while _wanted(board, index):
            time.sleep(PAUSE)

    try:
        signal.signal(signal.SIGUSR2, wedge)
    except (ValueError, OSError):
        return False
    main = threading.main_thread().ident
    assert main is not None

    def watch() -> None:
        while True:
            if _wanted(board, index):
                with contextlib.suppress(OSError):
                    signal.pthread_kill(main, signal.SIGUSR2)
                while _wanted(board, index):  # one interrupt per wedge
                    time.sleep(WATCH_INTERVAL)
            time.sleep(WATCH_INTERVAL)

    threading.Thread(target=watch, name="sentinel-chaos-api-wedge", daemon=True).start()
    _armed.append(True)
    return True
