"""The correctness fingerprint: taken once per model and weights, kept, served, commanded.

:mod:`.book` takes and compares the fingerprint (and provides it as evidence),
:mod:`.store` keeps it on disk, :mod:`.endpoint` serves ``/fingerprint`` and
:mod:`.cli` is ``sentinel fingerprint show/rebaseline``.

The face is empty on purpose: each name used outside the package loads a
library its other users do not need (prometheus_client for the book, aiohttp
for the endpoint, the settings and YAML for the command), so each is imported
from its module.
"""

__all__: list[str] = []
