"""Idle auto-sleep: canaries held so a server that sleeps when idle can sleep, and its evidence.

A server that sleeps after an idle TTL counts every canary as a request
(docs/design.md, "Idle auto-sleep"). The feature lives here whole but for
its rule: whether the server auto-sleeps, read from its command line
(:mod:`.sleep_flags`); the ``auto_sleep`` evidence section, fed by every
sample (:mod:`.watch`); and the canary hold the daemon hands the scheduler
as its ``hold`` (:mod:`.hold`). The ``wake`` rule, which judges the section
and owns the idle sleep's readiness, stays with the other hang rules
(:mod:`sentinel.verdict.hangs.wake`): its knobs are settings through
:class:`~sentinel.verdict.Policy`, and it is judged in the registry's order.

The face holds what the daemon wires: :class:`AutoSleepWatch`,
:class:`CanaryHold` and :func:`sleep_idle_ttl`; its only importer, the
daemon, already loads what they do.
"""

from sentinel.auto_sleep.hold import CanaryHold
from sentinel.auto_sleep.sleep_flags import sleep_idle_ttl
from sentinel.auto_sleep.watch import AutoSleepWatch

__all__ = ["AutoSleepWatch", "CanaryHold", "sleep_idle_ttl"]
