"""The scheduler owns time for canaries: cadence, idle gating, pairing, late answers, aiming.

:mod:`.scheduler` sends each canary kind on its cadence with jitter and
deadlines; around it, a hold it is handed that stops every canary (an
auto-sleeping server's idle, :mod:`sentinel.auto_sleep`), the comeback of a
server in a new epoch (:mod:`.comeback`), late answers awaited past their
deadline (:mod:`.late`), aiming at data-parallel engines (:mod:`.aiming`),
the model a canary addresses (:mod:`.served_model`), the text canary's
fallback (:mod:`.text_fallback`) and suspicion that sends the text canary at
once (:mod:`.suspicion`).

The face holds :class:`Suspicion`. The scheduler is left out and imported
from its module: it loads httpx-sse, structlog and YAML, which a user of
suspicion does not need.
"""

from sentinel.scheduling.suspicion import Suspicion

__all__ = ["Suspicion"]
