"""The process exit statuses of every ``sentinel`` command, in one place.

Scripts and CI jobs branch on these numbers (``sentinel probe`` in a pipeline,
``check-config`` in a pre-deploy step), so each command returns a member of
:class:`ExitCode` instead of a literal and no two commands can drift apart.
This module imports nothing from sentinel, so any command module may use it.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """What a command's exit status tells its caller."""

    OK = 0  # healthy, or the command did what it was asked
    UNHEALTHY = 1  # ran fine and found a problem (an unhealthy target, a doctor finding)
    USAGE = 2  # bad arguments or configuration: nothing was checked
    INTERRUPTED = 130  # stopped by Ctrl-C (128 + SIGINT), as shells report it
