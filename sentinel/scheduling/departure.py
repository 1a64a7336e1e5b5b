"""A server going away: sentinel lets go of its own requests so that its shutdown is not held.

vLLM's API server (uvicorn) stops listening the moment it is told to stop (the
kubelet's SIGTERM after a failed liveness probe, or any other restart), then
waits for every request still open before it exits ("Waiting for connections
to close"). A request on a hung engine never finishes, so a canary sentinel
left open there, or a late answer it still awaits, kept the old server alive
through the whole termination grace period until the SIGKILL: the restart
sentinel asked for came that much later (10 s, the shipped liveness grace, in
every real-vLLM engine-hang run: docs/chaos/supervised.md).

So the first refused connection of a server (its listener gone; the ledger
calls :meth:`Departure.left`) ends every canary still in flight at that
moment and every late wait: their connections close and the shutdown goes
on. An ended canary is recorded as what it met, a refused connection
(:data:`LET_GO`), never as a timeout or an answer. Canaries sent afterwards
are not touched: they meet the refusal themselves, or the next server.

Only a refusal lets go: a server that answers slowly, sheds load or is
saturated keeps every canary, as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["LET_GO", "Departure", "unless_left"]

T = TypeVar("T")

LET_GO = "the server stopped listening: sentinel closed the request so its shutdown goes on"


class Departure:
    """Set when the server stops listening; each wait sees the departure it began before."""

    def __init__(self) -> None:
        self._left: asyncio.Event | None = None  # made inside the event loop that waits
        self.count = 0  # departures seen (each let go of what was in flight then)

    def left(self) -> None:
        """The server's listener is gone: wake every request in flight now."""
        self.count += 1
        if self._left is not None:
            self._left.set()
            self._left = None  # the next departure is a new event

    def watch(self) -> asyncio.Event:
        """The event of the next departure, for a request starting now."""
        if self._left is None:
            self._left = asyncio.Event()
        return self._left


async def unless_left(departure: Departure | None, work: Awaitable[T]) -> T | None:
    """``work``'s result; None, ``work`` cancelled, if the server left first.

    Cancelling the caller cancels ``work`` too, as awaiting it directly would.
    """
    if departure is None:
        return await work
    task = asyncio.ensure_future(work)
    left = asyncio.ensure_future(departure.watch().wait())
    try:
        await asyncio.wait({task, left}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        raise
    finally:
        left.cancel()
    if task.done():
        return task.result()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)  # its connection closed before we go on
    return None
