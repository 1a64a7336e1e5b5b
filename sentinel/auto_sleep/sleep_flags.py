"""Idle auto-sleep, read from an inference server's command line.

vLLM's proposal (PR #47703, open) is ``--sleep-idle-ttl SECONDS`` (with
``--enable-sleep-mode``; ``--sleep-idle-level`` 1 or 2): the API server puts
the engine to sleep after that long without an inference request and wakes
it when the next one arrives, holding the request meanwhile. llama.cpp's
server has ``--sleep-idle-seconds SECONDS`` (-1, its default, disables it):
the model is unloaded after that long idle and any request reloads it.
Either way, any canary is a request that restarts the idle timer.
"""

from __future__ import annotations

from collections.abc import Sequence

from sentinel.evidence.process_model import flag_values

#: The flags that turn idle auto-sleep on, each server's own.
FLAGS = ("--sleep-idle-ttl", "--sleep-idle-seconds")


def sleep_idle_ttl(cmdline: Sequence[str]) -> tuple[float, str] | None:
    """The idle TTL a command line sets and the flag that set it (None: no auto-sleep).

    ``=`` or a space, dashes or underscores, the last one winning, as argparse
    has it; zero or a negative value (llama.cpp's -1) is off, and so is a value
    that is not a number.
    """
    found: tuple[float, str] | None = None
    for flag, value in flag_values(cmdline, FLAGS):
        try:
            ttl = float(value)
        except ValueError:
            found = None
            continue
        found = (ttl, flag) if ttl > 0 and ttl == ttl and ttl != float("inf") else None
    return found
