"""Late answers, the runner's side: a canary past its deadline, left running.

A late answer is an answer. With a late wait, :meth:`CanaryRunner.run
<sentinel.canary.runner.CanaryRunner.run>` runs the exchange in a task of its
own, bounded by ``late_wait`` (seconds past the send) and the same byte caps
(:func:`outlive`). At the deadline its caller still gets the TIMEOUT result at
once, and the request, still running, is offered to an adopter as a
:class:`LateCanary`. An adopter that takes it owns it: it awaits
:meth:`LateCanary.answer` (the second, ``late`` result) in a task it owns, and
cancelling that task closes the connection (a task cancelled before it ever
ran got nowhere: the owner then calls :meth:`LateCanary.close` or
:meth:`~LateCanary.cancel`). One that declines gets the
behaviour without a late wait: the connection is closed at the deadline (vLLM
aborts the request) and the result says so (``awaiting_late`` False).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import Any

from sentinel.canary.result import CanaryResult

__all__ = ["Adopter", "LateCanary", "outlive", "stop"]


class LateCanary:
    """A canary past its deadline whose request was left running, still awaited.

    ``timed_out`` is the TIMEOUT result its caller got at the deadline
    (``awaiting_late`` True); ``late_wait`` bounds the wait, in seconds past
    the send.
    """

    def __init__(
        self, timed_out: CanaryResult, attempt: asyncio.Task[CanaryResult], late_wait: float
    ) -> None:
        self.timed_out = timed_out
        self.late_wait = late_wait
        self._attempt = attempt

    async def answer(self) -> CanaryResult:
        """The second result: ``late`` True, ``duration`` from the send to the late answer.

        Judged on the reply as any result is; TIMEOUT when ``late_wait``
        passed without one (or the failure that ended it). Never raises for a
        failed canary; cancelled, it closes the connection before re-raising.
        """
        try:
            result = await asyncio.shield(self._attempt)
        except asyncio.CancelledError:
            await self.close()
            raise
        return replace(result, late=True, awaiting_late=False)

    def done(self) -> bool:
        """Whether the exchange has ended (answered, failed, bounded or cancelled)."""
        return self._attempt.done()

    def cancel(self) -> None:
        """Stop the exchange (its connection closes as it ends); nothing once it ended."""
        self._attempt.cancel()

    async def close(self) -> None:
        """Stop the exchange and wait until it ended: its connection is closed."""
        await stop(self._attempt)


# Offered a late canary at its deadline: True takes it (the adopter awaits it).
Adopter = Callable[[LateCanary], bool]


async def stop(task: asyncio.Task[CanaryResult]) -> None:
    """Cancel ``task`` and wait until it ended (its connection is closed by then)."""
    task.cancel()
    await asyncio.wait({task})


async def outlive(
    attempt: Coroutine[Any, Any, CanaryResult],
    *,
    name: str,
    deadline: float,
    late_wait: float,
    timed_out: Callable[[], CanaryResult],
    adopt: Adopter,
) -> CanaryResult:
    """Run ``attempt`` (bounded by ``late_wait`` itself) as a task that may outlive ``deadline``.

    Its result when it ends within ``deadline``; else ``timed_out()``, and the
    running attempt is offered to ``adopt`` (``awaiting_late`` when taken).
    Until adopted the task is this call's: it ends or is cancelled here,
    cancellation of the caller included.
    """
    task = asyncio.create_task(attempt, name=name)
    try:
        done, _ = await asyncio.wait({task}, timeout=deadline)
    except BaseException:  # the caller was cancelled: the canary goes with it
        await stop(task)
        raise
    if task in done:
        return task.result()
    result = timed_out()
    late = LateCanary(replace(result, awaiting_late=True), task, late_wait)
    if adopt(late):
        return late.timed_out
    await stop(task)  # declined: closed at the deadline, as without a late wait
    return result
