"""The model a canary addresses: given in its spec, configured, or asked of the server.

Asked of the server (the first id ``/v1/models`` lists) at most once per
server epoch: the answer is kept in the ledger, which forgets it when the
server restarts, and loops that need it at the same moment wait for one
question instead of asking together. The question is evidence like a canary,
recorded by the result sink (:meth:`~sentinel.record.sink.ResultSink.model_asked`):
a refused connection starts the listener-down timer, an answer clears it.
"""

from __future__ import annotations

import asyncio

from sentinel.canary.result import Reason
from sentinel.canary.runner import CanaryRunner, ModelResolutionError
from sentinel.canary.spec import CanarySpec
from sentinel.record.sink import ResultSink
from sentinel.telemetry.logging import get_logger

log = get_logger("sentinel.served_model")


class ServedModel:
    """Resolves the model for each canary spec against one target."""

    def __init__(
        self,
        runner: CanaryRunner,
        sink: ResultSink,
        *,
        configured: str | None = None,
    ) -> None:
        self.runner = runner
        self.sink = sink  # where the answer is recorded; its ledger keeps the model
        self.configured = configured
        self._lock = asyncio.Lock()
        self._unresolved: Reason | None = None  # the last cause logged, until one resolves

    async def resolve(self, spec: CanarySpec) -> str | None:
        """The model to address (None: the server named none yet; logged once per cause)."""
        if "model" in spec.request:
            return str(spec.request["model"])
        if self.configured:
            return self.configured
        async with self._lock:
            known = self.sink.ledger.model
            if known is not None:
                return known
            try:
                model = await self.runner.resolve_model(deadline=spec.deadline)
            except ModelResolutionError as exc:
                self.sink.model_asked(None, exc.reason)
                if exc.reason is not self._unresolved:  # once per cause, not every tick
                    self._unresolved = exc.reason
                    log.info("model_unresolved", reason=exc.reason.value, detail=exc.detail)
                return None
            self._unresolved = None
            self.sink.model_asked(model)
            log.info("model_resolved", model=model)
            return model
