"""The maintenance window: its state and token, its endpoint and ``sentinel maintenance``.

:mod:`.window` holds the state ("paused until") and its token,
:mod:`.endpoint` serves ``/maintenance`` on sentinel's HTTP port, and
:mod:`.cli` is ``sentinel maintenance set/clear/show`` with the client options
other commands that speak to a running sentinel share.

The face is empty on purpose: the endpoint loads aiohttp, the command YAML,
and neither of their users needs the other, so each name is imported from its
module.
"""

__all__: list[str] = []
