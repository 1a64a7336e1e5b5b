"""Views of the health state: the HTTP endpoints and the gRPC health service.

Read-only views of the one health state: the kubelet's probe answers
(:mod:`.answers`), the HTTP endpoints (:mod:`.http`) on a listener thread of
their own (:mod:`.probe_thread`), ``/status`` and ``/`` as an operator reads
them (:mod:`.status_view`), the state metrics read at scrape time
(:mod:`.state_metrics`) and ``grpc.health.v1.Health`` (:mod:`.grpc`).

The face is empty on purpose: the gRPC server loads grpc and the HTTP server
aiohttp, and a process that serves one need not load the other, so each name
is imported from its module.
"""

__all__: list[str] = []
