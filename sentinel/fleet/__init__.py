"""The Kubernetes Leases: the pool's restart budget, and each pod's restart-loop brake memory.

The restart budget is decided purely in :mod:`.budget`, kept in slot Leases by
:mod:`.lease`, offered to the verdict as evidence by :mod:`.gate` and shown on
``/metrics`` by :mod:`.series`; the brake's memory is encoded in
:mod:`.brake` and kept in a Lease by :mod:`.brake_memory`.

The face is the pure budget's vocabulary. The Lease loops, the gate and the
series are left out and imported from their modules: they load structlog,
httpx or prometheus_client, which the pure decision does not.
"""

from sentinel.fleet.budget import Wish

__all__ = ["Wish"]
